"""Builders that more than one test module uses: small configs, pages, records and stand-ins.

A test module imports shared helpers from here (or, for the drivers of real services, from
``tests/support.py``), never from another test module; shared fixtures live in ``conftest.py``
files.  ``tests/unit/test_tiers.py`` checks both."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import torch

from core.config import Config, ModelConfig, TrainerConfig, load_config
from core.spaces import Observation, parse_action
from models.dream.dreamer import Dreamer, StartState
from models.dream.env import dream_rollouts
from models.lm.saved import make_model
from models.policy.loss import policy_batch_loss
from models.policy.runner import PolicyRunner
from models.world_model.model import WorldModel
from models.world_model.outputs import Prediction
from streams import records
from streams.mixer import HybridMixer
from streams.records import Trajectory, Transition
from streams.topics import Topics

# --- policy (tests/unit/test_policy*.py, test_engine_chunked.py) -------------------------------

POLICY_CFG = ModelConfig(layers=2, d_model=32, heads=2, max_positions=256)
POLICY_TREE = '[1] textbox "Name"\n[2] button "Submit"\n  [3] text "hi"\n[4] combobox "Color"\n  [5] option "Red"\n  [6] option "Blue"'
POLICY_OBS = [
    Observation('Enter "Kiera" into the text field and press Submit.', "u", POLICY_TREE, focused=1),
    Observation("Click the button.", "u", '[4] button "OK"'),
    Observation(
        "Type hello in the box", "u", '[7] searchbox ""\n[8] link "More"', last_action_error="boom"
    ),
]
POLICY_PAGE = Observation(
    'Type "ab" in the box and press OK.',
    "u",
    '[4] button "OK"\n[5] link "Help"\n[6] textbox "Name"\n[7] combobox "Size"\n  [8] option "S"\n'
    '  [9] option "M"',
    focused=6,
)
POLICY_STARTS = [POLICY_OBS[0], POLICY_OBS[2], POLICY_PAGE]


def policy_trajectory(steps, source, group, reward, lps=None) -> Trajectory:
    """One trajectory of ``(obs, action text)`` steps; the reward at its last step."""
    ts = []
    for i, (obs, act) in enumerate(steps):
        ts.append(
            Transition(
                run_id="r",
                episode_id=f"{group}-{reward}-{id(steps)}",
                step=i,
                task="t",
                seed=0,
                source=source,
                policy_version=0,
                world_model_version=0,
                obs=obs.to_dict(),
                action=act,
                next_obs=obs.to_dict(),
                reward=reward if i == len(steps) - 1 else 0.0,
                done=i == len(steps) - 1,
                group_id=group,
                behaviour_logprob=None if lps is None else lps[i],
            )
        )
    return Trajectory.from_transitions(ts)


def policy_rollout(runner, obs, n):
    """``n`` actions of the runner on one page: the ``(obs, action text)`` steps and their logprobs."""
    hist, steps, lps = [], [], []
    for _ in range(n):
        a, lp, _ = runner.act([obs], [hist])[0]
        steps.append((obs, a.to_text()))
        lps.append(lp)
        hist = hist + [a.to_text()]
    return steps, lps


def wire_transition(
    obs, action, step, last, gid, ep, reward, lp, nt, info, source="real"
) -> Transition:
    """A transition built as ``run_collector`` builds it, then through the wire format."""
    rec = Transition(
        run_id="r",
        episode_id=ep,
        step=step,
        task="t",
        seed=0,
        source=source,
        policy_version=0,
        world_model_version=0,
        obs=obs.to_dict(),
        action=action,
        next_obs=obs.to_dict(),
        reward=reward if last else 0.0,
        done=last,
        group_id=gid,
        behaviour_logprob=lp,
        action_tokens=nt,
        candidates_hash=str(info.get("candidates_hash") or ""),
    )
    if info.get("temperature") is not None:
        rec.info["temperature"] = float(info["temperature"])
    return records.decode(records.encode(rec), expect="transition")


def collect_trajectories(runner, G=3, H=2, T=0.7, greedy=False) -> list[Trajectory]:
    """Collector-style acting: ``G`` episodes of ``H`` steps from each of ``POLICY_STARTS``."""
    trajs = []
    for s, obs in enumerate(POLICY_STARTS):
        for g in range(G):
            hist, ts = [], []
            for i in range(H):
                a, lp, nt, info = runner.act_info([obs], [hist], temperature=T, greedy=greedy)[0]
                ts.append(
                    wire_transition(
                        obs,
                        a.to_text(),
                        i,
                        i == H - 1,
                        f"g{s}-{T}",
                        f"e{s}-{g}-{T}",
                        float(g % 2),
                        lp,
                        nt,
                        info,
                    )
                )
                hist = hist + [a.to_text()]
            trajs.append(Trajectory.from_transitions(ts))
    return trajs


class SamePage:
    """A world model that changes nothing (no reward, never done)."""

    def predict(self, obs_list, actions, sample=False, abort=None):
        return [Prediction(o, 0.0, False, True, "", "") for o in obs_list]


def dream_trajectories(runner, T=1.3) -> list[Trajectory]:
    """``dream_rollouts`` (batched acting) and the dreamer's record fields (``Dreamer.dream_once``);
    a reward of 1 for every second rollout, at its end."""
    out = []
    for ro in dream_rollouts(
        runner, SamePage(), POLICY_STARTS, group_size=3, horizon=2, temperature=T
    ):
        ep = f"d{ro.group_id}-{len(out)}"
        ts = []
        for i, st in enumerate(ro.steps):
            last = i == len(ro.steps) - 1
            info = {"candidates_hash": st["candidates_hash"], "temperature": st["temperature"]}
            ts.append(
                wire_transition(
                    st["obs"],
                    st["action"],
                    i,
                    last,
                    ro.group_id,
                    ep,
                    float(len(out) % 2),
                    st["logprob"],
                    st["ntokens"],
                    info,
                    source="dream",
                )
            )
        out.append(Trajectory.from_transitions(ts))
    return out


def on_policy_loss(model, tok, cfg):
    """The real runner acts (collector-style at T = 0.7, batched dream-style at T = 1.3) and the
    real learner scores what it did, gradients zeroed first: the loss, after checking that every
    trajectory reached GSPO, every per-decision log ratio is 0, every rebuilt candidate set is the
    one acted on and some advantage is nonzero."""
    r = PolicyRunner(model, tok, cfg, seed=11)
    trajs = collect_trajectories(r, T=0.7) + dream_trajectories(r, T=1.3)
    model.zero_grad()
    loss, m = policy_batch_loss(model, tok, trajs, TrainerConfig(), cfg)
    assert m["n_gspo"] == len(trajs)
    assert max(abs(x) for x in m["log_ratios"]) < 1e-4, m["log_ratios"]
    assert m["cand_mismatch"] == 0 and m["adv_abs"] > 0
    return loss


# --- world model (tests/unit/test_world_model.py, test_wm_*.py, test_engine_chunked.py) ---------

# without the ensemble: the single heads' tests (the ensemble's: tests/unit/test_wm_ensemble.py)
WM_CFG = ModelConfig(layers=2, d_model=64, heads=2, max_positions=320, world_model_ensemble=0)
# element_ids as the env fills them (dreams refuse actions on ids that are not on the page, as WebEnv does)
WM_A = Observation(
    'Enter "Kiera" and press Submit.',
    "u",
    '[1] textbox "Name"\n[2] button "Submit"',
    next_id=3,
    element_ids=[1, 2],
)
WM_A2 = Observation(
    "Click OK.", "u", '[4] button "OK"\n[5] link "Help"', next_id=6, element_ids=[4, 5]
)
WM_B = Observation(
    WM_A.instruction,
    "u",
    '[1] textbox "Name" value "Kiera"\n[2] button "Submit"',
    next_id=3,
    element_ids=[1, 2],
)
WM_B2 = Observation(WM_A2.instruction, "u", '[6] heading "Done"', next_id=7, element_ids=[6])
WM_C = Observation(
    "Tick the boxes.", "u", '[1] checkbox "a"\n[2] checkbox "b"\n[3] button "Submit"', next_id=4
)
WM_C2 = Observation(
    WM_C.instruction,
    "u",
    '[1] checkbox "a" checked\n[2] checkbox "b"\n[3] button "Submit"',
    next_id=4,
)


def wm_transition(obs, act, nxt, reward, done, i=0) -> Transition:
    """One real step ``obs --act--> nxt`` (episode ``e{i}``)."""
    return Transition(
        run_id="r",
        episode_id=f"e{i}",
        step=0,
        task="t",
        seed=0,
        source="real",
        policy_version=0,
        world_model_version=0,
        obs=obs.to_dict(),
        action=act,
        next_obs=nxt.to_dict(),
        reward=reward,
        done=done,
    )


class FakeEmbedder:
    """Page embeddings that depend on the text only, the same in every process."""

    dim = 384

    def embed(self, texts):
        return torch.stack(
            [
                torch.randn(
                    384, generator=torch.Generator().manual_seed(len(t) * 7919 + ord(t[-1]))
                )
                for t in texts
            ]
        )


def wm_batch() -> list[Transition]:
    """Five world-model rows: typing, a last click with reward, a checkbox, a failure, a scroll."""
    return [
        wm_transition(WM_A, 'type(1, "Kiera")', WM_B, 0.0, False, 0),
        wm_transition(WM_A2, "click(4)", WM_B2, 1.0, True, 1),
        wm_transition(WM_C, "click(1)", WM_C2, 0.0, False, 2),
        wm_transition(WM_A, "click(2)", WM_A, -1.0, True, 3),
        wm_transition(WM_C, 'scroll("down")', WM_C, 0.0, False, 4),
    ]


def wm_model():
    """A fresh ``WM_CFG`` world model with its tokenizer as ``model._tok``."""
    model, tok = make_model(WorldModel, WM_CFG)
    model._tok = tok
    return model


# --- dream generator (tests/unit/test_dream_abandon.py, test_dream_gate.py) ------------------------

DREAM_PAGE = Observation(
    instruction="Click OK",
    url="http://127.0.0.1/t",
    tree='[1] button "OK"\n[2] button "No"',
    next_id=3,
)


class FixedPolicy:
    """A policy that always clicks element 2; counts its calls."""

    def __init__(self):
        self.calls = 0

    def act_info(self, obs_b, hist, temperature=1.0, greedy=False):
        self.calls += 1
        return [(parse_action("click(2)"), -0.7, 3, {}) for _ in obs_b]


def dreamer() -> Dreamer:
    """A ``Dreamer`` wired from fake parts, no Kafka and no S3: the round's bookkeeping only
    (``FixedPolicy`` acting on ``DREAM_PAGE``, a ``SamePage`` world model, both at version 3; what
    it publishes is appended to ``d.sent``)."""
    cfg = load_config(env={"DYNAWEB_RUN_ID": "abandon"})
    sent: list = []
    d = Dreamer(
        cfg.run_id,
        "p",
        cfg.dream,
        cfg.model,
        topics=Topics(cfg.run_id),
        slots={"policy": SimpleNamespace(version=3), "world_model": SimpleNamespace(version=3)},
        pub=SimpleNamespace(send=lambda topic, rec, key=None: sent.append(rec)),
        open_consumer=lambda **kw: None,
        watch=lambda on_announcement: SimpleNamespace(),
        work=Path("/nonexistent"),
    )
    d.sent = sent
    d.topics = SimpleNamespace(dream="dream")
    d.rng, d.producer_id = random.Random(0), "p"
    d.starts = deque([StartState(DREAM_PAGE, "miniwob/click-test", 1)])
    d.runners = lambda: (FixedPolicy(), SamePage())
    d.reload_clock = SimpleNamespace(used=lambda v, at=None: None)
    d.first_round = False
    d._round_done.clear()
    return d


# --- mixer (tests/unit/test_mixer*.py) -----------------------------------------------------------

_n = 0


def mixer_trajectory(
    source: str, pv: int = 0, group: str = "", ep: str | None = None
) -> Trajectory:
    """A one-step trajectory with a fresh episode id (unless ``ep``) and seed."""
    global _n
    _n += 1
    obs = {"instruction": "click", "tree": "page"}
    t = Transition(
        run_id="r",
        episode_id=ep or f"{source}-{_n}",
        step=0,
        task="t",
        seed=_n,
        source=source,
        policy_version=pv,
        world_model_version=0,
        obs=obs,
        action="stop",
        next_obs=obs,
        reward=1.0,
        done=True,
        group_id=group,
    )
    return Trajectory.from_transitions([t])


def make_mixer(**kw) -> HybridMixer:
    """A ``HybridMixer`` (half experts, 16 trajectories a batch, seed 1), ``kw`` overriding."""
    base = dict(
        run_id="r",
        worker_id="w",
        expert_fraction=0.5,
        batch_trajectories=16,
        max_staleness=2,
        samples_per_insert=0,
        expert_pool_size=100,
        cold_start_batch_s=2.0,
        seed=1,
    )
    base.update(kw)
    return HybridMixer(**base)


# --- trainer and stream records (integration and fault tests) ------------------------------------


def small_trainer(cfg: Config) -> Config:
    """Small models, one training step, a checkpoint every step, no InfoNCE (in place)."""
    cfg.model.layers, cfg.model.d_model, cfg.model.heads = 2, 64, 2
    cfg.trainer.checkpoint_every, cfg.trainer.max_steps, cfg.trainer.infonce_weight = 1, 1, 0.0
    return cfg


def training_batch(cfg: Config) -> records.TrainingBatch:
    """An expert-only policy batch of one successful one-step episode (batch id ``b1``)."""
    obs = {
        "instruction": 'Click on the "OK" button.',
        "url": "",
        "tree": '[1] button "OK"\n[2] button "No"',
    }
    t = records.Transition(
        run_id=cfg.run_id,
        episode_id="e1",
        step=0,
        task="miniwob/click-button",
        seed=1,
        source="expert",
        policy_version=0,
        world_model_version=0,
        obs=obs,
        action="click(1)",
        next_obs={**obs, "tree": ""},
        reward=1.0,
        done=True,
    )
    return records.TrainingBatch(
        run_id=cfg.run_id,
        batch_id="b1",
        worker_id="test",
        kind="expert_only",
        trajectories=[asdict(records.Trajectory.from_transitions([t]))],
        expert_fraction=1.0,
    )


def stream_obs(text: str, size: int = 0) -> dict:
    """A page dict whose tree is ``text``, padded to ``size`` characters."""
    tree = text if size <= len(text) else (text + " " + "x" * size)[:size]
    return {"instruction": "click the button", "tree": tree}


def transition(
    run: str,
    ep: str,
    step: int,
    source: str,
    done: bool,
    pv: int = 0,
    group: str = "",
    seed: int = 1,
    size: int = 0,
) -> Transition:
    """Step ``step`` of episode ``ep`` (reward 1 when ``done``), as the stream worker receives it."""
    return Transition(
        run_id=run,
        episode_id=ep,
        step=step,
        task="miniwob/click-button",
        seed=seed,
        source=source,
        policy_version=pv,
        world_model_version=0,
        obs=stream_obs(f"p{step}", size),
        action="click(3)",
        next_obs=stream_obs(f"p{step + 1}", size),
        reward=1.0 if done else 0.0,
        done=done,
        group_id=group,
        producer_id="test",
    )


def real_transition(
    task: str = "miniwob/a",
    seed: int = 0,
    ep: str = "e",
    step: int = 0,
    *,
    last_step: int = 1,
    success: bool = True,
    tree: str = "[1] button",
    action: str = "click(1)",
    instruction: str = "Click.",
    run: str = "r",
    **obs_extra,
) -> Transition:
    """A real transition of a world-model study's data: the episode ends at ``last_step`` (reward
    1 there if ``success``); the next page is the tree with ``!`` appended."""
    done = step == last_step
    obs = {"instruction": instruction, "url": "", "tree": tree, **obs_extra}
    return Transition(
        run_id=run,
        episode_id=ep,
        step=step,
        task=task,
        seed=seed,
        source="real",
        policy_version=0,
        world_model_version=0,
        obs=obs,
        action=action,
        next_obs={"instruction": instruction, "url": "", "tree": tree + "!"},
        reward=1.0 if done and success else 0.0,
        done=done,
    )


# --- dynaweb up (tests/e2e/test_up.py, tests/faults/test_loop_faults.py) -------------------------

UP_SETTINGS = {
    "DYNAWEB_TRAINER__CHECKPOINT_EVERY": "2",
    "DYNAWEB_TRAINER__CHECKPOINT_EVERY_S": "40",
    "DYNAWEB_STREAM__BATCH_TRAJECTORIES": "8",
    "DYNAWEB_DREAM__GROUP_SIZE": "4",
    "DYNAWEB_DREAM__BATCH": "8",
    "DYNAWEB_DREAM__HORIZON": "3",
    "DYNAWEB_DREAM__MAX_CHANGE_TOKENS": "96",
    "DYNAWEB_STREAM__GROUP_SIZE": "4",
    "DYNAWEB_UP__EXPERT_CONTEXTS": "1",
    "DYNAWEB_UP__PROGRESS_EVERY_S": "10",
    # one task where an untrained policy succeeds often enough (it clicks one of a few buttons) for
    # the G = 4 rollouts of a live group to differ in reward
    "DYNAWEB_COLLECTOR__TASKS": "miniwob/click-button",
    "DYNAWEB_COLLECTOR__MAX_STEPS": "6",
    # a checkpoint every 2 steps: 4 versions of staleness is the default's window in steps (2 x 5)
    "DYNAWEB_STREAM__MAX_STALENESS": "4",
    # 1 expert step/s (default 4) is still ~200 experts, several times what the policy batches use; the CPU
    # goes to the trainer instead (about twice the world-model steps), and the world model's batches hold
    # more of the live policy's transitions, whose failures (clicks on texts, wrong buttons, scrolls) teach
    # the reward head which actions do not succeed (with experts only, every action looks like success)
    "DYNAWEB_UP__EXPERT_STEPS_PER_S": "1",
}


# --- the models' legacy saved layout (tests/unit/test_model_migration.py, test_wm_heads.py) -----


def save_legacy(model, tokenizer, path, drop: tuple[str, ...] = ()) -> None:
    """Save ``model`` (a ``Policy`` or a ``WorldModel``) as the builds before
    ``models.lm.saved.FORMAT`` 2 did: its parts attached to the Hugging Face model under their old
    names, saved inside ``model.safetensors``, and the flags in ``config.json``.  ``drop``: old
    module names left out (a file saved before that part existed)."""
    import copy

    from models.lm.saved import LEGACY_NAMES, LEGACY_SPEC, LEGACY_STATE

    kind = "policy" if hasattr(model, "element_head") else "world_model"
    lm = copy.deepcopy(model.lm)
    parts = model.parts()
    for old, new in LEGACY_NAMES[kind].items():
        if parts.get(new) is not None and old not in drop:
            setattr(lm, old, copy.deepcopy(parts[new]))
    spec = asdict(model.spec)
    for old, new in LEGACY_SPEC[kind].items():
        setattr(lm.config, old, bool(spec[new]))
    state = asdict(model.state) if kind == "world_model" else {}
    for old, new in LEGACY_STATE[kind].items():
        if state.get(new) is not None:
            setattr(lm.config, old, state[new])
    lm.save_pretrained(path)
    tokenizer.save_pretrained(path)


def git_checkout(root, statement: str = "docs/statement.md"):
    """A git checkout under ``root`` with one committed file and a committed statement (the
    study's pre-registration runs against it); returns its path."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)

    root.mkdir(parents=True, exist_ok=True)
    git("init", "-q")
    git("config", "user.email", "study@example.invalid")
    git("config", "user.name", "study")
    (root / "code.py").write_text("x = 1\n")
    (root / statement).parent.mkdir(parents=True, exist_ok=True)
    (root / statement).write_text("# Statement\narms, tasks, seeds, contrast, effect, power\n")
    git("add", "-A")
    git("commit", "-q", "-m", "statement")
    return root


# a page with two buttons: clicking "OK" succeeds, "No" fails (the rollout-rule tests' page)
TWO_BUTTONS = Observation(
    'Click on the "OK" button.', "", '[1] button "OK"\n[2] button "No"', None, "", 3, [1, 2]
)
