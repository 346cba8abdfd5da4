"""Seeded model outputs, byte for byte: the second half of the before/after check of a refactor.

``dynaweb check-behaviour models --out F`` runs both models, built from config with fixed seeds on
one thread, through every path that produces a number the system acts or learns on, and writes
each number exactly (floats as ``float.hex``, tensors as sha256 of their bytes):

* ``policy.act``       -- ``PolicyRunner.act_info`` on fixed pages: the sampled action, its
  recorded ``log pi_T(a|s)``, token count and info (acting's cached scoring path);
* ``policy.update.*``  -- ``models.train.learner.policy_update`` through a real DeepSpeed engine
  (CPU, ZeRO 0) on a GSPO group of the runner's own rollouts and an expert trajectory, whole and in
  micro-batches: loss, the loss's report, gradient norm, and the weights after the step (the
  loss's batched scoring path);
* ``world_model.update`` -- ``world_model_update`` on five real steps: loss, report, gradient
  norm, the weights after the step, and whether the heads count as trained;
* ``world_model.predict.*`` -- ``WorldModelRunner.predict`` with greedy and rerank decoding,
  before and after that step.

Weights are hashed as a sorted multiset of per-tensor digests, so moving a module (a renamed
parameter) does not change the figure; changing a value does.  ``tests/unit/
test_model_fingerprint.py`` holds the figures of the code as it was before a refactor
(``tests/unit/golden/model_fingerprint.json``) and fails on any difference.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from core.config import ModelConfig, TrainerConfig
from core.spaces import Observation
from streams.records import Trajectory, Transition

POLICY_CFG = ModelConfig(layers=2, d_model=32, heads=2, max_positions=256)
# the world model without the ensemble (model.world_model_ensemble): the figures recorded before it
WM_CFG = ModelConfig(layers=2, d_model=64, heads=2, max_positions=320, world_model_ensemble=0)
TREE = (
    '[1] textbox "Name"\n[2] button "Submit"\n  [3] text "hi"\n[4] combobox "Color"\n'
    '  [5] option "Red"\n  [6] option "Blue"'
)
PAGES = [
    Observation('Enter "Kiera" into the text field and press Submit.', "u", TREE, focused=1),
    Observation("Click the button.", "u", '[4] button "OK"'),
    Observation(
        "Type hello in the box", "u", '[7] searchbox ""\n[8] link "More"', last_action_error="x"
    ),
]
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


class _Embedder:
    """Page embeddings that depend on the text only (the InfoNCE term's targets)."""

    dim = 384

    def embed(self, texts: list[str]) -> torch.Tensor:
        return torch.stack(
            [
                torch.randn(
                    384, generator=torch.Generator().manual_seed(len(t) * 7919 + ord(t[-1]))
                )
                for t in texts
            ]
        )


def _num(x: Any) -> Any:
    """A JSON value that keeps every bit of a number."""
    if isinstance(x, torch.Tensor):
        if x.numel() == 1:
            return float(x.detach().float().item()).hex()
        return hashlib.sha256(x.detach().contiguous().cpu().numpy().tobytes()).hexdigest()
    if isinstance(x, bool) or x is None or isinstance(x, str | int):
        return x
    if isinstance(x, float):
        return x.hex()
    if isinstance(x, dict):
        return {str(k): _num(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, list | tuple):
        return [_num(v) for v in x]
    return repr(x)


def weights_digest(module: torch.nn.Module) -> str:
    """The weights' values, independent of their names: sha256 over the sorted digests of every
    parameter and buffer."""
    digests = sorted(
        hashlib.sha256(
            str(tuple(t.shape)).encode() + t.detach().contiguous().cpu().numpy().tobytes()
        ).hexdigest()
        for t in [*module.parameters(), *module.buffers()]
    )
    return hashlib.sha256("".join(digests).encode()).hexdigest()


@contextmanager
def _one_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _trajectory(steps: list, source: str, group: str, reward: float, lps: list | None):
    ts = [
        Transition(
            run_id="r",
            episode_id=f"{group}-{source}-{reward}-{k}",
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
        for k, (i, (obs, act)) in enumerate(enumerate(steps))
    ]
    return Trajectory.from_transitions(ts)


def _act(runner: Any) -> tuple[list, list]:
    """Acting on every page at two temperatures, and a GSPO group of two-step rollouts (plus an
    expert trajectory) for the update."""
    acted = []
    for t in (0.7, 1.3):
        for a, lp, nt, info in runner.act_info(PAGES, [[], ["click(2)"], []], temperature=t):
            acted.append([a.to_text(), lp, nt, info])
    trajs = []
    for k in range(4):
        hist, steps, lps = [], [], []
        for _ in range(2):
            a, lp, _ = runner.act([PAGES[k % 3]], [hist])[0]
            steps.append((PAGES[k % 3], a.to_text()))
            lps.append(lp)
            hist = hist + [a.to_text()]
        trajs.append(_trajectory(steps, "dream", "g", float(k % 2), lps))
    trajs.append(
        _trajectory(
            [(PAGES[0], 'type(1, "Kiera")'), (PAGES[0], "click(2)")], "expert", "", 1.0, None
        )
    )
    return acted, trajs


def policy_fingerprint() -> dict:
    from models.lm.saved import make_model
    from models.policy.model import Policy
    from models.policy.runner import PolicyRunner
    from models.train.engine import make_engine
    from models.train.learner import policy_update

    out: dict = {}
    for name, cfg in (("plain", POLICY_CFG), ("element_head", _pointer(POLICY_CFG))):
        torch.manual_seed(0)
        model, tok = make_model(Policy, cfg)
        out[f"{name}.init"] = weights_digest(model)
        acted, trajs = _act(PolicyRunner(model, tok, cfg, seed=3))
        out[f"{name}.act"] = _num(acted)
        for chunk in (0, 2):
            twin = copy.deepcopy(model)
            engine = make_engine(twin, 1e-3)
            loss, stats, gn, _ = policy_update(
                engine, tok, trajs, TrainerConfig(chunk_rows=chunk), cfg
            )
            out[f"{name}.update.chunk{chunk}"] = {
                "loss": _num(loss),
                "stats": _num(stats),
                "grad_norm": _num(float(gn)),
                "weights": weights_digest(twin),
            }
            if chunk == 0:  # acting on the updated weights (the expert's actions pulled up)
                for _ in range(20):
                    policy_update(engine, tok, trajs, TrainerConfig(chunk_rows=0), cfg)
                after, _ = _act(PolicyRunner(twin.eval(), tok, cfg, seed=5))
                out[f"{name}.act.after_updates"] = _num(after)
    return out


def _pointer(cfg: ModelConfig) -> ModelConfig:
    import dataclasses

    return dataclasses.replace(cfg, policy_pointer=True)


def _wm_batch() -> list[Transition]:
    rows = [
        (WM_A, 'type(1, "Kiera")', WM_B, 0.0, False),
        (WM_A2, "click(4)", WM_B2, 1.0, True),
        (WM_C, "click(1)", WM_C2, 0.0, False),
        (WM_A, "click(2)", WM_A, -1.0, True),
        (WM_C, 'scroll("down")', WM_C, 0.0, False),
    ]
    return [
        Transition(
            run_id="r",
            episode_id=f"e{i}",
            step=0,
            task="t",
            seed=0,
            source="real",
            policy_version=0,
            world_model_version=0,
            obs=o.to_dict(),
            action=a,
            next_obs=n.to_dict(),
            reward=r,
            done=d,
        )
        for i, (o, a, n, r, d) in enumerate(rows)
    ]


def _predict(model: Any, tok: Any) -> dict:
    from core.config import DreamConfig
    from core.spaces import parse_action
    from models.world_model.runner import WorldModelRunner

    obs = [WM_A, WM_A2, WM_C, WM_A]
    acts = [parse_action(a) for a in ('type(1, "Kiera")', "click(4)", "click(1)", "click(2)")]
    out = {}
    for decode in ("greedy", "rerank"):
        runner = WorldModelRunner(model, tok, DreamConfig(wm_decode=decode), max_change_tokens=64)
        preds = runner.predict(obs, acts)
        out[decode] = _num(
            [
                [p.next_obs.tree, p.reward, p.done, p.ok, p.reason, p.text, p.p_success, p.p_done]
                for p in preds
            ]
        )
    return out


def world_model_fingerprint() -> dict:
    from models.lm.saved import make_model
    from models.train.engine import make_engine
    from models.train.learner import world_model_update
    from models.world_model.model import WorldModel

    torch.manual_seed(0)
    model, tok = make_model(WorldModel, WM_CFG)
    out: dict = {"init": weights_digest(model), "predict.fresh": _predict(model, tok)}
    engine = make_engine(model, 1e-3)
    tc = TrainerConfig(wm_chunk_rows=0, infonce_weight=0.5)
    for step in range(3):  # enough steps for the heads to be used by predict
        loss, stats, gn = world_model_update(engine, tok, _wm_batch(), tc, _Embedder(), 64)
        out[f"update.{step}"] = {
            "loss": _num(loss),
            "stats": _num(stats),
            "grad_norm": _num(float(gn)),
            "weights": weights_digest(model),
        }
    out["heads_trained"] = bool(model.heads_trained())
    out["predict.trained"] = _predict(model.eval(), tok)
    return out


def fingerprint() -> dict:
    """Every figure, on one thread (a thread count changes float sums)."""
    with _one_thread():
        return {"policy": policy_fingerprint(), "world_model": world_model_fingerprint()}


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``b`` (the code now) differs from ``a`` (the recorded figures): paths, empty when
    identical.  A figure the code reports in addition (a new key of a report) is not a difference;
    one it no longer reports, or reports with another value, is."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(a):
            if k not in b:
                out.append(f"{path}/{k}: no longer reported")
            else:
                out.extend(differences(a[k], b[k], f"{path}/{k}"))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def main(args: argparse.Namespace) -> int:
    """``dynaweb check-behaviour models --out F`` (write), ``... models A.json`` (compare the code
    now against a written file: exit 1 on any difference)."""
    got = fingerprint()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
        print(f"model fingerprint written to {args.out}")
    files = list(args.files or [])
    if not files:
        return 0
    with open(files[0]) as f:
        want = json.load(f)
    diff = differences(want, got)
    for d in diff[: args.show]:
        print(d)
    print("model outputs identical" if not diff else f"{len(diff)} figures differ")
    return 1 if diff else 0
