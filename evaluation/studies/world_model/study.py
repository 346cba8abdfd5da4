"""``dynaweb experiment world-model``: collect -> train -> evaluate the world model offline.

The reproducible fidelity check of the world model against the trivial "nothing
changes" baseline, on *held-out real transitions of (task, seed) pairs never trained on*:

1. **collect** real transitions in the live browser (``collectors.corpus.collect_to_list``
   on an in-process task server, no Kafka: the records are kept in memory and
   written to ``OUT/transitions.jsonl``, one ``streams.records.Transition`` per
   line, the format of ``dynaweb demos`` and ``dynaweb eval world-model --data``):
   the scripted experts (``source = expert``) and the random policy
   (``source = real``; most of its episodes fail or run out of steps) on several
   MiniWoB tasks;
2. **split** (``wm_study.split``, ``evaluation.studies.world_model.split``): whole
   (task, seed) pairs held out (``heldout_fraction`` of them), the ``--train-data``
   transitions of those pairs dropped, then the held-out transitions whose exact
   world-model input occurs in training removed (``split episode``: the earlier
   per-episode rule); ``wm_study.heldout_tasks`` never enter training and are scored
   apart (``unseen_tasks``);
3. **train** (``evaluation.studies.world_model.train``) a world model from config on the
   training episodes with the trainer's loss (``models.world_model.loss.world_model_batch_loss``: change-text
   likelihood + ``infonce_weight`` x InfoNCE against the frozen MiniLM page
   embedding + ``head_weight`` x the class-balanced reward/done head
   cross-entropies), AdamW with linear warm-up and cosine decay, gradient clipping,
   for ``steps`` steps or ``time_budget_s`` seconds, whichever comes first; the
   model is saved as a Hugging Face directory ``OUT/world_model`` (what
   ``models.lm.saved.load_model`` and ``--checkpoint DIR`` read);
4. **evaluate** with the code of ``dynaweb eval world-model``
   (``evaluation.eval.world_model.eval_world_model``, greedy decoding, held-out split of
   the same JSONL file), printing the model's figures next to the baseline's,
   and the exact command that recomputes them.

``--quick`` is a ~2-minute smoke run of the same pipeline (few episodes, a tiny
model, a few dozen steps): it checks the plumbing, not the fidelity.  The table
(or nothing but the JSON with ``--json``) is followed by one JSON object on the
last line: ``model`` and ``baseline`` figures, ``beats_baseline`` per metric,
the data counts (``failed_share``: share of training transitions from episodes
that did not succeed), the wall time of each phase, and the command.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

import torch

from core.config import Config
from evaluation.studies.world_model.config import (
    WorldModelStudyConfig,
    WorldModelStudyRunConfig,
    resolve_study,
)
from evaluation.studies.world_model.split import split_by_episode, split_sides, train_only
from evaluation.studies.world_model.train import train_world_model

__all__ = ["split_by_episode", "train_only"]  # re-exported: the split lives in split.py

METRICS = ("exact_match", "change_f1", "reward_bal_acc", "done_bal_acc")

# --- pure helpers ------------------------------------------------------------------


def episode_outcomes(transitions: list) -> dict[str, bool]:
    """episode_id -> succeeded (its last step is ``done`` with reward > 0)."""
    last: dict[str, Any] = {}
    for t in transitions:
        cur = last.get(t.episode_id)
        if cur is None or t.step > cur.step:
            last[t.episode_id] = t
    return {e: bool(t.done and float(t.reward) > 0) for e, t in last.items()}


def failed_share(transitions: list) -> float:
    """Share of transitions that belong to episodes that failed or never finished."""
    if not transitions:
        return 0.0
    ok = episode_outcomes(transitions)
    return sum(not ok[t.episode_id] for t in transitions) / len(transitions)


def beats(model: dict, baseline: dict, metrics: tuple = METRICS) -> dict[str, bool]:
    """Per metric: is the model strictly above the baseline?"""
    return {k: float(model[k]) > float(baseline[k]) for k in metrics}


def eval_command(out: Path, fraction: float, decode: str = "rerank") -> str:
    """The ``dynaweb eval world-model`` command that recomputes the figures."""
    return (
        f"dynaweb eval world-model --checkpoint {shlex.quote(str(out / 'world_model'))} "
        f"--data {shlex.quote(str(out / 'heldout.jsonl'))} --split all --decode {decode} --json"
    )


# --- 1. collect ------------------------------------------------------------------------


def collect(cfg: Config, x: WorldModelStudyConfig) -> tuple[list, dict]:
    """Expert, random and perturbed-expert transitions from the live browser (each on seeds of
    its own); (transitions, counts)."""
    from collectors.agents import ExpertAgent, RandomAgent
    from collectors.corpus import collect_to_list
    from collectors.perturbed import PerturbedExpertAgent

    c = dataclasses.replace(
        cfg,
        collector=dataclasses.replace(
            cfg.collector,
            tasks=list(x.tasks),
            contexts=x.contexts,
            max_steps=x.max_steps,
            seed_start=x.seed_start,
        ),
    )
    from collectors.taskserver import serve

    out, counts = [], {}
    server, _, base = serve()  # our own task server: nothing shared with a running stack

    async def one(policy: str, n: int, offset: int) -> None:
        cc = dataclasses.replace(c, collector=dataclasses.replace(c.collector, max_episodes=n))
        agent = {
            "expert": lambda: ExpertAgent(),
            "random": lambda: RandomAgent(seed=x.seed + 1),
            "perturbed": lambda: PerturbedExpertAgent(
                ExpertAgent(), x.perturb_prob, seed=x.seed + 2
            ),
        }[policy]
        sent, st = await collect_to_list(
            cc, agent, base, f"wm-experiment-{policy}", offset, run_length=2
        )
        out.extend(sent)
        counts[policy] = {
            "episodes": st.episodes,
            "successes": st.successes,
            "transitions": len(sent),
        }

    try:
        if x.expert_episodes:
            asyncio.run(one("expert", x.expert_episodes, 0))
        if x.random_episodes:
            asyncio.run(one("random", x.random_episodes, 500_000))  # other seeds than the experts'
        if x.perturbed_episodes:
            asyncio.run(one("perturbed", x.perturbed_episodes, 250_000))
    finally:
        server.shutdown()
        server.server_close()
    return out, counts


def write_jsonl(path: Path, transitions: list) -> None:
    from collectors.demos import to_line

    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        for t in transitions:
            fh.write(to_line(t) + "\n")
    tmp.replace(path)


# --- 3. the whole experiment ---------------------------------------------------------------


def load_or_collect(
    cfg: Config, x: WorldModelStudyConfig, path: Path, data: str | list | None, log: Any = print
) -> tuple[list, dict]:
    """The transitions of ``data`` (a JSONL file, or several, concatenated in order; no episode
    may be in two of them) or, without it, collected now; both kept at ``path``.  Returns
    (transitions, counts)."""
    from evaluation.eval.sources import read_jsonl

    counts: dict = {}
    files = [data] if isinstance(data, str) else list(data or [])
    if files:
        trans, seen = [], set()
        for f in files:
            part = read_jsonl(f)
            eps = {t.episode_id for t in part}
            if eps & seen:
                raise ValueError(
                    f"--data {f}: {len(eps & seen)} episode(s) already in an earlier file"
                )
            seen |= eps
            trans += part
        if len(files) > 1 or Path(files[0]).resolve() != path.resolve():
            write_jsonl(path, trans)
        counts["from_file"] = files[0] if len(files) == 1 else files
    else:
        log(
            f"collecting: {x.expert_episodes} expert + {x.random_episodes} random + "
            f"{x.perturbed_episodes} perturbed-expert episodes on {len(x.tasks)} tasks"
        )
        trans, counts = collect(cfg, x)
        write_jsonl(path, trans)
    return trans, counts


def failed_episode_share(transitions: list) -> float:
    """Share of episodes that did not succeed (failed, or ran out of steps)."""
    ok = episode_outcomes(transitions)
    return sum(not v for v in ok.values()) / max(1, len(ok))


def by_policy(transitions: list) -> dict:
    """Transitions and episodes per collecting policy (expert, perturbed, random)."""
    out: dict[str, dict] = {}
    for t in transitions:
        k = (
            "expert"
            if t.source == "expert"
            else ("perturbed" if "perturbed" in str(t.producer_id) else "random")
        )
        row = out.setdefault(k, {"transitions": 0, "episodes": set()})
        row["transitions"] += 1
        row["episodes"].add(t.episode_id)
    return {
        k: {"transitions": v["transitions"], "episodes": len(v["episodes"])}
        for k, v in sorted(out.items())
    }


def data_summary(trans: list, train: list, held: list, counts: dict) -> dict:
    """The result's ``data``: sizes of the episode split and what the training side holds.
    ``real_transitions_budget``: every training transition is a real interaction (expert,
    perturbed and random alike) and counts."""
    return {
        "real_transitions_budget": len(train),
        "train_by_policy": by_policy(train),
        "heldout_by_policy": by_policy(held),
        "train_failed_episode_share": round(failed_episode_share(train), 4),
        "heldout_failed_episode_share": round(failed_episode_share(held), 4),
        "transitions": len(trans),
        "episodes": len({t.episode_id for t in trans}),
        "train_transitions": len(train),
        "train_episodes": len({t.episode_id for t in train}),
        "heldout_transitions": len(held),
        "heldout_episodes": len({t.episode_id for t in held}),
        "train_failed_share": round(failed_share(train), 4),
        "train_random_share": round(sum(t.source == "real" for t in train) / len(train), 4),
        "tasks": sorted({t.task for t in trans}),
        "collected": counts,
    }


def split_data(
    trans: list, x: WorldModelStudyConfig, counts: dict, train_data: list | None, log: Any
):
    """(training side, held-out side, unseen tasks' side, the result's ``data``): the split
    ``wm_study.split`` of ``trans`` (dreams dropped) with ``train_data``'s transitions on the
    training side (``evaluation.studies.world_model.split.split_sides``)."""
    trans = [t for t in trans if t.source != "dream"]
    extra = train_only(train_data, trans, log)
    sides = split_sides(trans, extra, x.split, x.heldout_fraction, x.heldout_tasks)
    train, held, unseen = sides["train"], sides["held"], sides["unseen"]
    if not train or not held:
        raise ValueError(
            f"the {x.split} split left {len(train)} training and {len(held)} held-out "
            "transitions; collect more episodes or change the held-out fraction"
        )
    stats = data_summary(trans + extra, train, held, counts)
    stats["wm_split"] = x.split
    stats["leak_before_dedup"] = sides["leak"]
    stats.update(sides["counts"])
    if unseen:
        stats["unseen_tasks"] = sorted({t.task for t in unseen})
        stats["unseen_transitions"] = len(unseen)
        stats["unseen_episodes"] = len({t.episode_id for t in unseen})
    if train_data:
        stats["train_only"] = {"files": list(train_data), "transitions": len(extra)}
    return train, held, unseen, stats


def run_experiment(
    cfg: Config,
    x: WorldModelStudyConfig,
    out: Path,
    data: str | list | None = None,
    log: Any = print,
    train_data: list | None = None,
) -> dict:
    """Collect (or read ``data``), split (``wm_study.split``), train, evaluate on the held-out
    transitions (and on the unseen tasks, ``wm_study.heldout_tasks``).  ``train_data``: files
    whose transitions go to training only (``--train-data``), beside the training side of the
    split; those of held-out (task, seed) pairs and unseen tasks are dropped."""
    from evaluation.eval.world_model import eval_world_model

    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, int(x.threads)))
    t_all = time.time()
    t0 = time.time()
    path = out / "transitions.jsonl"
    trans, counts = load_or_collect(cfg, x, path, data, log)
    t_collect = time.time() - t0
    train, held, unseen, data_stats = split_data(trans, x, counts, train_data, log)
    write_jsonl(out / "heldout.jsonl", held)  # the held-out set, to commit beside the result
    if unseen:
        write_jsonl(out / "heldout-unseen-tasks.jsonl", unseen)
    log(
        f"data: {data_stats['train_transitions']} training transitions ({data_stats['train_episodes']} episodes, "
        f"{data_stats['train_failed_share']:.0%} from failed/unfinished episodes; "
        f"{data_stats['train_failed_episode_share']:.0%} of the episodes failed), "
        f"{data_stats['heldout_transitions']} held out ({data_stats['heldout_episodes']} episodes, "
        f"split {x.split}), {len(unseen)} of unseen tasks"
    )
    embedder = None
    if x.infonce_weight > 0:
        from models.lm.embedder import default_embedder

        embedder = default_embedder()
    log(
        f"training a {x.layers}x{x.d_model} world model: <= {x.steps} steps of {x.batch}, <= {x.time_budget_s:g} s"
    )
    tr = train_world_model(train, x, out / "world_model", cfg.model, embedder, log)
    ecfg = dataclasses.replace(
        cfg,
        stream=dataclasses.replace(cfg.stream, heldout_fraction=x.heldout_fraction),
        dream=dataclasses.replace(cfg.dream, max_change_tokens=x.max_change_tokens),
    )
    t0 = time.time()
    evs = {}
    for dec in dict.fromkeys([x.decode, "rerank", "greedy"]):
        log(f"evaluating on the held-out transitions ({dec} decoding)")
        evs[dec] = eval_world_model(
            ecfg, str(out / "world_model"), str(out / "heldout.jsonl"), "all", decode=dec
        )
    unseen_res = None
    if unseen:
        log(f"evaluating on the unseen tasks {data_stats['unseen_tasks']} ({x.decode} decoding)")
        unseen_res = eval_figures(
            eval_world_model(
                ecfg,
                str(out / "world_model"),
                str(out / "heldout-unseen-tasks.jsonl"),
                "all",
                decode=x.decode,
            )
        )
    t_eval = time.time() - t0
    res = {
        "experiment": "world-model",
        "quick": x.quick,
        "out": str(out),
        "decode": x.decode,
        "wm_split": x.split,
        **eval_figures(evs[x.decode]),
        "model_by_decode": {d: _figs(e) for d, e in evs.items()},
        "stage1_by_decode": {d: e.get("stage1") for d, e in evs.items()},
        "unseen_tasks": unseen_res,
        "data": data_stats,
        "train": {k: v for k, v in tr.items() if k != "history"},
        "world_model": f"{x.layers}x{x.d_model}, {x.max_positions} positions, {tr['parameters']:,} parameters",
        "seconds": {
            "collect": round(t_collect, 1),
            "train": tr["seconds"],
            "eval": round(t_eval, 1),
            "total": round(time.time() - t_all, 1),
        },
        "eval_command": eval_command(out, x.heldout_fraction, x.decode),
        "threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "config": dataclasses.asdict(x),
    }
    (out / "train_history.json").write_text(json.dumps(tr["history"], indent=1))
    (out / "result.json").write_text(json.dumps(res, indent=1))
    return res


def _figs(e: dict) -> dict:
    return {**{k: round(float(e[k]), 4) for k in METRICS}, "ok_rate": round(float(e["ok_rate"]), 4)}


def eval_figures(ev: dict) -> dict:
    """The result's figures of one ``eval_world_model`` answer: the model's and the baseline's,
    which the model beats, the stage-1 figures and whether every target is met, the sizes."""
    model = _figs(ev)
    base = {k: round(float(ev["baseline_" + k]), 4) for k in METRICS}
    b = beats(model, base)
    st = ev.get("stage1")
    return {
        "model": model,
        "baseline": base,
        "beats_baseline": b,
        "beats_baseline_all": all(b.values()),
        "stage1": st,
        "targets_met": bool(st and all(r["met"] for r in st["targets"].values())),
        "n_eval": int(ev["n"]),
        "eval_episodes": int(ev["episodes"]),
    }


def format_result(res: dict) -> str:
    d = res["data"]
    lines = [
        f"world-model experiment ({'quick' if res['quick'] else 'full'}): {res['world_model']}, "
        f"{res.get('decode', 'greedy')} decoding",
        f"trained {res['train']['steps']} steps ({res['train']['epochs']} epochs) on {d['train_transitions']} transitions "
        f"of {d['train_episodes']} episodes ({d['train_failed_share']:.0%} from failed/unfinished episodes)",
        f"held out (split {res.get('wm_split', 'episode')}): {res['n_eval']} transitions of "
        f"{res['eval_episodes']} episodes",
        f"{'metric':16s} {'model':>8s} {'nothing-changes':>16s}  beats",
    ]
    for k in METRICS:
        lines.append(
            f"{k:16s} {res['model'][k]:8.3f} {res['baseline'][k]:16.3f}  {'yes' if res['beats_baseline'][k] else 'no'}"
        )
    lines.append(f"{'ok_rate':16s} {res['model']['ok_rate']:8.3f} {'-':>16s}")
    for dec, f in (res.get("model_by_decode") or {}).items():
        if dec != res.get("decode"):
            lines.append(
                f"{dec} decoding: " + ", ".join(f"{k} {f[k]:.3f}" for k in (*METRICS, "ok_rate"))
            )
    s = res["seconds"]
    lines.append(
        f"wall time: collect {s['collect']} s, train {s['train']} s, eval {s['eval']} s, total {s['total']} s"
    )
    st = res.get("stage1")
    if st:
        from evaluation.eval.world_model_targets import format_targets

        lines.append(
            f"stage 1 ({res.get('decode')} decoding): {st['terminal_steps']} terminal steps, "
            f"{st['changed_steps']} steps that change the page, {st['replay_episodes']} whole "
            f"episodes dreamed open-loop; real-transition budget {d.get('real_transitions_budget')}"
        )
        lines += format_targets(st["targets"])
    u = res.get("unseen_tasks")
    if u:
        lines.append(
            f"unseen tasks {', '.join(d.get('unseen_tasks', []))}: {u['n_eval']} transitions, "
            + ", ".join(f"{k} {u['model'][k]:.3f} / {u['baseline'][k]:.3f}" for k in METRICS)
            + f", targets met {u['targets_met']}"
        )
    lines.append(f"recompute the figures: {res['eval_command']}")
    return "\n".join(lines)


def main(args: Any, cfg: WorldModelStudyRunConfig) -> int:
    """``dynaweb experiment world-model [--quick] --out DIR [--data FILE ...] [--steps N] [--json]``."""
    x = resolve_study(cfg, args)
    as_json = bool(getattr(args, "json", False))
    log = (lambda *_a, **_k: None) if as_json else (lambda m: print(m, flush=True))
    data, train_data = getattr(args, "data", None), getattr(args, "train_data", None)
    res = run_experiment(cfg.runtime(), x, Path(args.out), data, log, train_data)
    if not as_json:
        print(format_result(res))
    print(json.dumps(res))
    return 0
