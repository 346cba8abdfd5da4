"""A probe (docs/results/imagination/README.md, section "Task set").

Chooses the imagination study's evaluation tasks by a rule stated before any of the study's
results, and the tasks of its world-model corpus (disjoint from them).  Run from the repository
root:

    python -m evaluation.studies.probes.select_tasks screen   # the rule -> tasks.json
    python -m evaluation.studies.probes.select_tasks corpus   # corpus.jsonl.gz on tasks.json's corpus_tasks
    python -m evaluation.studies.probes.select_tasks table    # tasks.json's candidates as Markdown

``screen`` (intermediate files in ``$IMAGINATION_WORK``, default /tmp/imagination-screen, so a
rerun resumes):

1. candidates: every task with a registered expert (``dynaweb tasks --json``, ``experts``);
2. expert: ``evaluation.expert_table.expert_table`` (the code of ``dynaweb experts``) on training
   seeds 0-49, 2 contexts, with the study's step limit (6) and episode time limit (60 s); kept:
   success >= 99 % (50/50).  Seeds 0-9 first; a task that fails one of them cannot pass, so only
   the others run seeds 10-49 (the same decision, less time);
3. element head: 10 demonstrations per kept task, collected as the study's ``demos`` step does
   (the expert collector, one context, runs of 10 episodes per task, ``seed_offset`` =
   104,729 x (seed + 1), here seed ``SEED``) but on an in-process task server instead of through
   Kafka; kept: every demonstration action is in the policy's candidate set C(s) (the learner's
   ``trajectory_decisions``) and names a page element (``acted_element``: the element head scores it);
4. imitation start: one policy, the study's (GPT-Neo 2 x 128, 4 heads, the element head, the
   instruction-word bit, ``model.seed`` = ``SEED``), behaviour-cloned on the demonstrations of every
   task kept at 3 at once with the trainer's loss (``policy_batch_loss``), lr 3e-4 with 10 warm-up
   steps, gradient clip 1.0, batches of 16 trajectories drawn uniformly, ``IMITATION_STEPS`` steps
   (fewer passes over each demonstration than the study's; the README says why and what follows);
   then ``dynaweb eval policy`` greedy on 20 training seeds per task (900,000-900,019:
   ``collector.seed_stop`` lowered to 900,000 for the check only; the study trains below
   1,000,000 and evaluates from 1,000,000);
5. decision: eligible = imitation success in [10 %, 70 %]; chosen: the eligible tasks ordered by
   (expert mean steps >= 3 first, |success - 40 %|, name), the first ``N_TASKS``; corpus tasks:
   every candidate whose expert passed 2 that is not chosen.

``corpus``: ``evaluation.studies.world_model.study.collect`` (what ``dynaweb experiment
world-model`` collects) on every candidate whose expert passed 2: 600 expert, 600 random and
1,200 perturbed-expert (perturb_prob 0.7) episodes, the world-model study's other defaults
(cached in WORK, so it can run before the decision); then the episodes of the corpus tasks (the
chosen tasks' dropped) written gzipped, one ``streams.records.Transition`` per line, and the
counts to tasks.json's ``corpus``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path("docs/results/imagination")
WORK = Path(os.environ.get("IMAGINATION_WORK", "/tmp/imagination-screen"))
SEED = 100  # the screen's model and demonstration seed: not a study training seed (0, 1, 2)
EXPERT_SEEDS = 50
FIRST_SEEDS = 10
MAX_STEPS = 6  # experiment.max_steps
TIME_LIMIT_MS = 60_000  # experiment.episode_time_limit_ms
DEMOS = 10  # experiment.demos_per_task
IMITATION_STEPS = 60  # experiment.imitation_steps (the README says what this means for the screen)
BATCH = 16  # experiment.batch_trajectories
EVAL_START, EVAL_N = 900_000, 20
BAND = (0.10, 0.70)
CENTRE = 0.40
N_TASKS = 8
MULTI_STEPS = 3.0
MIN_MULTI = 3
CORPUS = {"expert_episodes": 600, "random_episodes": 600, "perturbed_episodes": 1200}
RULE = (
    "Candidates: every task with a registered expert (dynaweb tasks --json). Kept when (1) its "
    "expert succeeds on >= 99 % of training seeds 0-49 (2 contexts) within the study's 6 steps "
    "and 60 s, (2) every action of its 10 demonstrations (collected as the study's demos step, "
    f"seed {SEED}) is in the policy's candidate set and names a page element, and (3) the study's "
    "imitation start (GPT-Neo 2x128 with the element head, behaviour-cloned on 10 demonstrations "
    f"per task, one policy on every task kept at (2), {IMITATION_STEPS} steps of 16) succeeds "
    f"greedily on 10-70 % of {EVAL_N} training seeds ({EVAL_START:,}-{EVAL_START + EVAL_N - 1:,}). Chosen: the kept tasks ordered by "
    "(expert mean steps >= 3 first, distance of imitation success from 40 %, task name), the "
    f"first {N_TASKS}. Corpus tasks: every candidate that passed (1) and is not chosen."
)


def log(msg: str) -> None:
    print(f"[select {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cached(name: str, make):
    """The JSON in WORK/name, or ``make()`` written there."""
    path = WORK / name
    if path.exists():
        return json.loads(path.read_text())
    value = make()
    path.write_text(json.dumps(value, indent=1))
    return value


def dynaweb_json(*args: str) -> object:
    """The JSON a ``dynaweb`` command prints on its last line."""
    out = subprocess.run(["dynaweb", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- 1-2. candidates and their experts --------------------------------------------------------


def candidates() -> list[str]:
    return sorted(dynaweb_json("tasks", "--json")["experts"])


def expert_rows(tasks: list[str]) -> dict[str, dict]:
    """task -> expert_table row on seeds 0-49 (only failures of seeds 0-9 stop a task there)."""
    from evaluation.expert_table import expert_table

    kw = dict(contexts=2, max_steps=MAX_STEPS, time_limit_ms=TIME_LIMIT_MS)
    first = {r["task"]: r for r in expert_table(tasks, range(FIRST_SEEDS), **kw)}
    rest = [t for t, r in first.items() if r["successes"] == r["episodes"]]
    log(f"experts: {len(rest)} of {len(tasks)} succeed on seeds 0-{FIRST_SEEDS - 1}")
    more = {r["task"]: r for r in expert_table(rest, range(FIRST_SEEDS, EXPERT_SEEDS), **kw)}
    out = {}
    for t, a in first.items():
        b = more.get(t, {"episodes": 0, "successes": 0, "mean_steps": 0.0, "failed_seeds": []})
        n = a["episodes"] + b["episodes"]
        steps = a["mean_steps"] * a["episodes"] + b["mean_steps"] * b["episodes"]
        out[t] = {
            "expert_seeds": f"0:{FIRST_SEEDS if t not in more else EXPERT_SEEDS}",
            "expert_episodes": n,
            "expert_successes": a["successes"] + b["successes"],
            "expert_success": round((a["successes"] + b["successes"]) / n, 3),
            "expert_mean_steps": round(steps / n, 2),
            "expert_failed_seeds": (a["failed_seeds"] + b["failed_seeds"])[:5],
            "expert_reasons": a["reasons"] + b.get("reasons", []),
        }
    return out


# --- 3. demonstrations and the element head ----------------------------------------------------


def collect_demos(tasks: list[str], path: Path) -> None:
    """DEMOS expert episodes per task, as the study's ``demos`` step collects them (no Kafka)."""
    from collectors.agents import ExpertAgent
    from collectors.corpus import collect_to_list
    from collectors.taskserver import serve
    from core.config import Config
    from evaluation.studies.world_model.study import write_jsonl

    cfg = Config()
    cc = dataclasses.replace(
        cfg.collector,
        tasks=list(tasks),
        contexts=1,
        max_steps=MAX_STEPS,
        episode_time_limit_ms=TIME_LIMIT_MS,
        max_episodes=DEMOS * len(tasks),
    )
    cfg = dataclasses.replace(cfg, collector=cc)
    server, _, base = serve()
    try:
        sent, _ = asyncio.run(
            collect_to_list(
                cfg,
                lambda: ExpertAgent(),
                base,
                "imagination-demos",
                seed_offset=104_729 * (SEED + 1),
                run_length=DEMOS,
            )
        )
    finally:
        server.shutdown()
        server.server_close()
    write_jsonl(path, sent)


def episodes_by_task(path: Path) -> dict[str, list[list]]:
    from evaluation.eval.sources import read_jsonl

    eps: dict = {}
    for t in read_jsonl(str(path)):
        eps.setdefault(t.task, {}).setdefault(t.episode_id, []).append(t)
    return {
        task: [sorted(e, key=lambda t: t.step) for e in by_ep.values()]
        for task, by_ep in eps.items()
    }


def pointable(by_task: dict[str, list[list]]) -> dict[str, dict]:
    """task -> demonstrations, steps, steps whose action is outside C(s), steps naming no element."""
    from core.config import ModelConfig
    from models.lm.match import acted_element
    from models.lm.saved import make_model
    from models.policy.decisions import trajectory_decisions
    from models.policy.model import Policy

    mc = ModelConfig()
    _, tok = make_model(Policy, dataclasses.replace(mc, layers=1, d_model=32, heads=2))
    out = {}
    for task, eps in by_task.items():
        outside, unnamed, steps, bad = 0, 0, 0, []
        for e in eps:
            for d, t in zip(trajectory_decisions(tok, e, mc.max_positions), e, strict=True):
                steps += 1
                out_c, no_el = d.index < 0, acted_element(t.action) is None
                outside, unnamed = outside + out_c, unnamed + no_el
                if out_c or no_el:
                    bad.append(t.action)
        out[task] = {
            "demos": len(eps),
            "demo_successes": sum(float(e[-1].reward) > 0 for e in eps),
            "demo_steps": steps,
            "demo_steps_outside_candidates": int(outside),
            "demo_steps_naming_no_element": int(unnamed),
            "demo_actions_not_pointable": sorted(set(bad))[:4],
        }
    return out


# --- 4. the imitation start ---------------------------------------------------------------------


def imitation_policy(by_task: dict[str, list[list]], out_dir: Path) -> dict:
    """Behaviour cloning on every demonstration at once, saved at ``out_dir``; what ran."""
    import torch

    from core.config import ModelConfig, TrainerConfig
    from models.lm.saved import make_model
    from models.policy.loss import policy_batch_loss
    from models.policy.model import Policy
    from models.train.engine import lr_factor
    from streams.records import Trajectory

    mc = ModelConfig(layers=2, d_model=128, heads=4, seed=SEED, policy_pointer=True)
    mc.instruction_match = True
    tc = TrainerConfig()
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    model, tok = make_model(Policy, mc)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=tc.lr)
    trajs = [Trajectory.from_transitions(e) for eps in by_task.values() for e in eps]
    steps = IMITATION_STEPS
    t0 = time.time()
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = tc.lr * lr_factor(s, tc.warmup_steps, tc.decay_steps, tc.min_lr_ratio)
        batch = [trajs[rng.randrange(len(trajs))] for _ in range(BATCH)]
        opt.zero_grad()
        loss, _ = policy_batch_loss(model, tok, batch, tc, mc)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        if s % 20 == 0 or s == steps - 1:
            log(f"imitation step {s + 1}/{steps}: loss {float(loss):.3f}")
    model.eval()
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    return {"steps": steps, "batch": BATCH, "demos": len(trajs), "train_s": round(time.time() - t0)}


def live_success(tasks: list[str], ckpt: Path) -> dict:
    """``dynaweb eval policy`` greedy on EVAL_N training seeds per task."""
    return dynaweb_json(
        "eval",
        "policy",
        "--checkpoint",
        str(ckpt),
        "--tasks",
        ",".join(tasks),
        "--seeds",
        f"{EVAL_START}:{EVAL_START + EVAL_N}",
        "--contexts",
        "2",
        "--no-dreams",
        "--json",
        "--set",
        f"collector.seed_stop={EVAL_START}",
        "--set",
        f"collector.max_steps={MAX_STEPS}",
        "--set",
        f"collector.episode_time_limit_ms={TIME_LIMIT_MS}",
    )


# --- 5. the decision -----------------------------------------------------------------------------


def decide(rows: dict[str, dict]) -> tuple[list[str], list[str]]:
    """Fill every row's ``decision`` and ``why``; (chosen tasks, corpus tasks)."""
    eligible = []
    for t, r in rows.items():
        if r["expert_success"] < 0.99:
            r["decision"], r["why"] = "out", "expert below 99 % on seeds 0-49 (6 steps)"
        elif r.get("demo_steps_outside_candidates") or r.get("demo_steps_naming_no_element"):
            r["decision"], r["why"] = "corpus", "an expert action the element head cannot score"
        elif r["imitation_success"] < BAND[0]:
            r["decision"], r["why"] = "corpus", "imitation start below 10 %"
        elif r["imitation_success"] > BAND[1]:
            r["decision"], r["why"] = "corpus", "imitation start above 70 %"
        else:
            eligible.append(t)
    order = sorted(
        eligible,
        key=lambda t: (
            rows[t]["expert_mean_steps"] < MULTI_STEPS,
            abs(rows[t]["imitation_success"] - CENTRE),
            t,
        ),
    )
    chosen = order[:N_TASKS]
    for i, t in enumerate(order):
        r = rows[t]
        r["decision"] = "chosen" if t in chosen else "corpus"
        r["why"] = f"eligible, rank {i + 1} of {len(order)}"
    corpus = sorted(t for t, r in rows.items() if r["decision"] == "corpus")
    return sorted(chosen), corpus


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip()


def screen() -> dict:
    WORK.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tasks = cached("candidates.json", candidates)
    log(f"{len(tasks)} candidates (tasks with a registered expert)")
    rows = cached("experts.json", lambda: expert_rows(tasks))
    kept = [t for t in tasks if rows[t]["expert_success"] >= 0.99]
    log(f"{len(kept)} experts at >= 99 % on seeds 0-49; demonstrations next")
    demos = WORK / "demos.jsonl"
    if not demos.exists():
        collect_demos(kept, demos)
    by_task = episodes_by_task(demos)
    for t, p in cached("pointable.json", lambda: pointable(by_task)).items():
        rows[t].update(p)
    able = [
        t
        for t in kept
        if not rows[t]["demo_steps_outside_candidates"]
        and not rows[t]["demo_steps_naming_no_element"]
    ]
    log(f"{len(able)} with every demonstration action scored by the element head; imitation next")
    ckpt = WORK / "policy"
    bc = cached("imitation.json", lambda: imitation_policy({t: by_task[t] for t in able}, ckpt))
    live = cached("live.json", lambda: live_success(able, ckpt))
    for t in able:
        lt = live["tasks"][t]
        rows[t].update(
            imitation_success=round(lt["success_rate"], 3),
            imitation_successes=lt["successes"],
            imitation_episodes=lt["episodes"],
            imitation_mean_steps=round(lt["mean_steps"], 2),
            imitation_errors=lt["errors"],
        )
    chosen, corpus = decide({t: rows[t] for t in kept})
    for t in tasks:
        if t not in kept:
            rows[t]["decision"] = "out"
            rows[t]["why"] = "expert below 99 % on seeds 0-49 within 6 steps"
    multi = [t for t in chosen if rows[t]["expert_mean_steps"] >= MULTI_STEPS]
    res = {
        "rule": RULE,
        "commit": commit(),
        "command": "python -m evaluation.studies.probes.select_tasks screen",
        "screen_seed": SEED,
        "expert_seeds": f"0:{EXPERT_SEEDS}",
        "imitation": {**bc, "eval_seeds": f"{EVAL_START}:{EVAL_START + EVAL_N}", "greedy": True},
        "tasks": chosen,
        "multi_step_tasks": multi,
        "corpus_tasks": corpus,
        "candidates": {t: rows[t] for t in tasks},
        "screen_s": round(time.time() - t0),
    }
    if len(chosen) < N_TASKS or len(multi) < MIN_MULTI:
        res["shortfall"] = f"{len(chosen)} chosen, {len(multi)} with >= 3 steps"
    (HERE / "tasks.json").write_text(json.dumps(res, indent=1) + "\n")
    log(f"chosen {chosen} (multi-step {multi}); corpus {len(corpus)} tasks -> {HERE}/tasks.json")
    return res


# --- the corpus ------------------------------------------------------------------------------------


def corpus_pool() -> list[str]:
    """Every candidate whose expert passed (1): the corpus tasks and the chosen ones."""
    rows = json.loads((WORK / "experts.json").read_text())
    return sorted(t for t, r in rows.items() if r["expert_success"] >= 0.99)


def collect_pool(path: Path) -> dict:
    """Expert, random and perturbed-expert episodes on ``corpus_pool()`` (before the decision: the
    chosen tasks' episodes are dropped when the corpus is written); written to ``path``."""
    from core.config import Config
    from evaluation.studies.world_model.config import WorldModelStudyConfig
    from evaluation.studies.world_model.study import collect, write_jsonl

    x = WorldModelStudyConfig(tasks=corpus_pool(), **CORPUS)
    t0 = time.time()
    trans, counts = collect(Config(), x)
    write_jsonl(path, trans)
    return {
        "tasks": x.tasks,
        "settings": {**CORPUS, "perturb_prob": x.perturb_prob, "max_steps": x.max_steps},
        "by_policy": counts,
        "collect_s": round(time.time() - t0),
    }


def corpus() -> dict:
    """The pool's episodes of tasks.json's corpus tasks -> corpus.jsonl.gz; counts in tasks.json."""
    from collectors.demos import to_line
    from evaluation.eval.sources import read_jsonl

    pool = WORK / "corpus-pool.jsonl"
    info = cached("corpus-pool.json", lambda: collect_pool(pool))
    if not (HERE / "tasks.json").exists():
        return info  # collected before the decision; rerun after the screen to write the corpus
    sel = json.loads((HERE / "tasks.json").read_text())
    keep = set(sel["corpus_tasks"])
    trans = [t for t in read_jsonl(str(pool)) if t.task in keep]
    out = HERE / "corpus.jsonl.gz"
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=9) as fh:
        for t in trans:
            fh.write(to_line(t) + "\n")
    per: dict = {}
    for t in trans:
        d = per.setdefault(t.task, {"transitions": 0, "episodes": set(), "sources": {}})
        d["transitions"] += 1
        d["episodes"].add(t.episode_id)
        d["sources"][t.source] = d["sources"].get(t.source, 0) + 1
    sel["corpus"] = {
        "command": "python -m evaluation.studies.probes.select_tasks corpus",
        "commit": commit(),
        "collected": info,
        "dropped_tasks": sorted(set(info["tasks"]) - keep),
        "transitions": len(trans),
        "episodes": len({t.episode_id for t in trans}),
        "bytes": out.stat().st_size,
        "per_task": {
            k: {
                "transitions": v["transitions"],
                "episodes": len(v["episodes"]),
                "by_source": v["sources"],
            }
            for k, v in sorted(per.items())
        },
    }
    (HERE / "tasks.json").write_text(json.dumps(sel, indent=1) + "\n")
    log(
        f"corpus: {len(trans)} transitions, {sel['corpus']['episodes']} episodes, {out.stat().st_size} bytes"
    )
    return sel["corpus"]


def table() -> str:
    """tasks.json's candidates as the README's Markdown table."""
    sel = json.loads((HERE / "tasks.json").read_text())
    order = {"chosen": 0, "corpus": 1, "out": 2}
    rows = sorted(
        sel["candidates"].items(),
        key=lambda kv: (order[kv[1]["decision"]], -kv[1].get("imitation_success", -1), kv[0]),
    )
    out = [
        "| task | expert (seeds) | expert mean steps | demo steps outside C(s) / naming no element "
        "| imitation start | decision | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for t, r in rows:
        pt = (
            f"{r['demo_steps_outside_candidates']} / {r['demo_steps_naming_no_element']}"
            if "demo_steps" in r
            else ""
        )
        im = (
            f"{r['imitation_successes']}/{r['imitation_episodes']}"
            if "imitation_success" in r
            else ""
        )
        out.append(
            f"| {t.split('/')[-1]} | {r['expert_successes']}/{r['expert_episodes']} "
            f"| {r['expert_mean_steps']:.2f} | {pt} | {im} | {r['decision']} | {r.get('why', '')} |"
        )
    text = "\n".join(out)
    print(text)
    return text


if __name__ == "__main__":
    import torch

    torch.set_num_threads(2)
    WORK.mkdir(parents=True, exist_ok=True)
    {"screen": screen, "corpus": corpus, "table": table}[
        sys.argv[1] if len(sys.argv) > 1 else "screen"
    ]()
