"""The written artifacts of ``dynaweb experiment sample-efficiency``: ``results.csv`` (one row per
(arm, seed, point)), ``success_vs_real.png`` and the Markdown page ``results.md``, from the figures
of ``evaluation.studies.sample_efficiency.report`` (``write_all`` writes all three and returns the
summary)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from evaluation.studies.sample_efficiency.arm_names import ARMS
from evaluation.studies.sample_efficiency.plot import write_png
from evaluation.studies.sample_efficiency.report import (
    CSV_FIELDS,
    LABELS,
    SOURCES,
    aggregate,
    arm_summary,
    every_real_step,
    headline,
    paired_differences,
    rows_from_cells,
)


def write_csv(rows: list[dict], path: Path) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_FIELDS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k) for k in CSV_FIELDS})
    path.write_text(buf.getvalue())


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(p: dict) -> str:
    if p["ci_low"] is None:
        return "n/a (1 seed)"
    return f"[{_pct(p['ci_low'])}, {_pct(p['ci_high'])}]"


def _share(x: dict | None) -> str:
    x = x or {}
    return " / ".join(_pct(x.get(k)) for k, _ in SOURCES)


def markdown(
    agg: dict[str, list[dict]],
    head: dict,
    meta: dict,
    arms: dict | None = None,
    head_online: dict | None = None,
) -> str:
    """``results.md``: the run, the headline table and its reading (every real step counted;
    then the online accounting when a world-model corpus makes them differ), every point, the final
    success per task and the diagnostics (the last two when ``meta`` has them)."""
    arms = arms or {}
    lines = _md_run(meta) + _md_headline(head, arms) + _md_online(head_online, arms)
    lines += _md_points(agg) + _md_per_task(meta)
    diag = meta.get("diagnostics") or {}
    if diag:
        lines += ["", "## Diagnostics (per arm, mean over seeds)", ""]
        for arm, d in diag.items():
            lines.append(f"- {arm}: " + ", ".join(f"{k} {v}" for k, v in d.items()))
    return "\n".join(lines) + "\n"


def _md_run(meta: dict) -> list[str]:
    lines = [
        f"# Sample efficiency: {meta.get('experiment_id', '')}",
        "",
        f"Command: `{meta.get('command', '')}`  ",
        f"Wall time: {meta.get('wall_s', 0) / 60:.1f} min  ",
        f"Tasks: {', '.join(meta.get('tasks', []))}  ",
        f"Training seeds: {meta.get('seeds')}; evaluation: {meta.get('eval_seeds_per_task')} seeds per task "
        f"starting at {meta.get('eval_seed_start')} (greedy, live browser, success = raw reward > 0)  ",
        "Interval: Student-t 95% over training seeds (n/a with one seed).  ",
        "Policy steps: optimizer steps of the arm's own run (after the imitation checkpoint it starts from); "
        "nonzero-advantage share: GSPO groups that reached the trainer's loss with a nonzero advantage, "
        "from the trainer's counters (- where no group reached it).",
    ]
    fz = meta.get("frozen") or {}
    if fz:
        lines[6:6] = [
            f"Frozen configuration: G = {fz.get('group_size')}, temperature {fz.get('temperature')}, reward "
            f"{fz.get('reward')}; {fz.get('online_policy_steps')} policy steps in every arm after imitation, "
            f"{fz.get('expert_samples_per_step')} demonstration samples per step.  "
        ]
    return lines


def _md_headline(head: dict, arms: dict) -> list[str]:
    lines = [
        "",
        "## Headline",
        "",
        "| arm | final success | 95% interval | policy steps | real steps used | real steps to reach real-only's "
        "final | nonzero-advantage groups (live / dream) |",
        "|---|---|---|---|---|---|---|",
    ]
    tgt = head.get("target")
    for arm in ARMS:
        a = head["arms"].get(arm)
        if a is None:
            continue
        need = a["steps_to_target"]
        ps = (arms.get(arm) or {}).get("policy_steps")
        lines.append(
            f"| {LABELS[arm]} | {_pct(a['final_success'])} | "
            f"{_ci({'ci_low': a['ci_low'], 'ci_high': a['ci_high']})} | "
            f"{'-' if ps is None else f'{ps:.0f}'} | "
            f"{a['final_real_steps']:.0f} | {'not reached' if need is None else f'{need:.0f}'} | "
            f"{_share((arms.get(arm) or {}).get('nonzero_adv_share'))} |"
        )
    lines.append("")
    if head.get("ratio") is not None:
        lines.append(
            f"DynaWeb needs **{head['ratio']:.2f}x** the real interactions of the real-only arm to reach "
            f"its final success ({_pct(tgt)}); the paper reports about 0.33x."
        )
    elif tgt is not None and not head.get("improved"):
        lines.append(
            f"The real-only arm did not improve on its start (the imitation checkpoint, {_pct(tgt)}), so "
            "the ratio of real interactions is undefined in this run."
        )
    elif tgt is not None and "dynaweb" in head["arms"]:
        lines.append(
            f"DynaWeb did not reach the real-only arm's final success ({_pct(tgt)}) within the budget."
        )
    m, d = arms.get("imitation_matched"), arms.get("dynaweb")
    if m and d:
        lines.append(
            f"Matched control: with the same {m['policy_steps']:.0f} policy steps and demonstration samples "
            f"per step, behaviour cloning alone reaches {_pct(m['final_success'])} against DynaWeb's "
            f"{_pct(d['final_success'])}."
        )
    return lines


def _md_online(head: dict | None, arms: dict) -> list[str]:
    """The second accounting: online steps only (the world-model corpus as offline data, as in
    the paper); only when some arm's world model was pretrained on one."""
    if not head or not any((a or {}).get("real_steps_offline") for a in arms.values()):
        return []
    lines = ["", "### Online real steps only (the world-model corpus treated as offline data)", ""]
    for arm in ("dynaweb", "dynaweb_dream_only"):
        a, s = head["arms"].get(arm), arms.get(arm) or {}
        if a is None:
            continue
        need, ratio = a["steps_to_target"], head["ratios"].get(arm)
        lines.append(
            f"- {LABELS[arm]}: {a['final_real_steps']:.0f} online real steps used (plus "
            f"{s.get('real_steps_offline') or 0:.0f} in the corpus); to reach real-only's final: "
            f"{'not reached' if need is None else f'{need:.0f}'}; ratio "
            + ("n/a" if ratio is None else f"{ratio:.2f}x")
        )
    return lines


def _md_points(agg: dict[str, list[dict]]) -> list[str]:
    lines = [
        "",
        "## All points",
        "",
        "Point 0 is the imitation checkpoint every other arm starts from; the last "
        "point of an online arm is its final checkpoint (budget -), read out at the real steps it used; "
        "imitation_matched's point i is its checkpoint at the largest policy-step count an online arm had at "
        "point i.",
        "",
        "| arm | point | budget | policy steps (mean) | real steps (mean) | success | "
        "95% interval | episodes | time-outs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, curve in agg.items():
        for p in curve:
            ps = p.get("policy_steps")
            lines.append(
                f"| {arm} | {p['point']} | {p['budget'] if p['budget'] is not None else '-'} | "
                f"{'-' if ps is None else f'{ps:.0f}'} | {p['real_steps']:.0f} | {_pct(p['success'])} | "
                f"{_ci(p)} | {p['episodes']} | {p['timeouts']} |"
            )
    return lines


def _md_per_task(meta: dict) -> list[str]:
    per_task = meta.get("per_task") or {}
    if not per_task:
        return []
    apart = [t for t in meta.get("apart_tasks") or [] if any(t in d for d in per_task.values())]
    tasks = apart + sorted({t for d in per_task.values() for t in d} - set(apart))
    lines = [
        "",
        "## Final success per task (mean over seeds)",
        "",
        "| arm | " + " | ".join(t.split("/")[-1] for t in tasks) + " | mean of the others |",
        "|---|" + "---|" * (len(tasks) + 1),
    ]
    for arm, d in per_task.items():
        rest = [d[t] for t in tasks if t not in apart and d.get(t) is not None]
        others = sum(rest) / len(rest) if rest else None
        cells = " | ".join(_pct(d.get(t)) for t in tasks)
        lines.append(f"| {arm} | {cells} | {_pct(others)} |")
    if apart:
        names = ", ".join(t.split("/")[-1] for t in apart)
        lines.append(f"\n({names} first; the last column is the mean of the other tasks.)")
    return lines


def write_all(cells: list[dict], out: Path, meta: dict) -> dict:
    """Write results.csv, success_vs_real.png, results.md; returns the summary (``arms``: ``arm_summary``)."""
    rows = rows_from_cells(cells)
    if not rows:
        raise ValueError("no evaluated cells to report")
    agg = aggregate(rows)
    agg_all = every_real_step(agg)
    head, head_online = headline(agg_all), headline(agg)
    arms = arm_summary(cells, agg)
    write_csv(rows, out / "results.csv")
    write_png(
        agg_all,
        out / "success_vs_real.png",
        f"{meta.get('experiment_id', '')}: success vs real interactions",
        LABELS,
    )
    (out / "results.md").write_text(markdown(agg_all, head, meta, arms, head_online))
    return {
        "rows": len(rows),
        "curves": agg_all,
        "headline": head,
        "headline_online": head_online,
        "arms": arms,
        "paired": paired_differences(rows),
    }
