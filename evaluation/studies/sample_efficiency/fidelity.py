"""The DynaWeb arms' world models against reality, per task: why dreaming did or did not pay.

``dynaweb dream-fidelity OUT`` reads the finished cells of a sample-efficiency run (nothing is
rerun) and pools, per DynaWeb arm over its seeds, what the study measured of the arm's final
world model on the probe (real transitions of (task, seed) pairs it never trained on:
``cell["wm_fidelity"]["dynaweb_final"]["stage1"]``):

- terminal reward balanced accuracy, exact match on the steps whose page changed, the share of
  steps it predicts a change against the real share, the share of outputs that applied, and the
  AUROC of its reward when the probe's episodes are replayed through it;
- per task: the probe episodes replayed through the world model, their dreamed and real success,
  and the terminal reward balanced accuracy; beside them, the arm's and ``real_only``'s final
  success over ``imitation_matched`` (paired by seed), so a task where dreams never succeed can be
  read against the task where dreaming fell behind.

Pure functions on cell dicts, no services.
"""

from __future__ import annotations

from pathlib import Path

from evaluation.studies.sample_efficiency.ablation import final, mean4, read_cells, write_and_print
from evaluation.studies.sample_efficiency.arm_names import DREAM_ARMS

SCALARS = (
    "reward_bal_acc_terminal",
    "exact_match_changed",
    "exact_match",
    "exact_match_baseline",
    "change_rate_pred",
    "change_rate_real",
    "apply_rate",
    "replay_auroc",
)


def _gain(
    cells: dict[tuple[str, int], dict], arm: str, task: str, seeds: list[int]
) -> float | None:
    """Mean over seeds of ``arm``'s final success on ``task`` minus ``imitation_matched``'s."""
    d = []
    for s in seeds:
        a, b = cells.get((arm, s)), cells.get(("imitation_matched", s))
        if a and b and task in final(a)[1] and task in final(b)[1]:
            d.append(final(a)[1][task] - final(b)[1][task])
    return mean4(d)


def dream_fidelity(cells: dict[tuple[str, int], dict]) -> dict:
    """Per DynaWeb arm with a probed world model: the pooled figures of the module doc."""
    out: dict = {}
    for arm in DREAM_ARMS:
        probed = {
            s: c["wm_fidelity"]["dynaweb_final"]["stage1"]
            for (a, s), c in sorted(cells.items())
            if a == arm and (c.get("wm_fidelity") or {}).get("dynaweb_final", {}).get("stage1")
        }
        if not probed:
            continue
        seeds = sorted(probed)
        res: dict = {"seeds": seeds}
        res.update({k: mean4([probed[s].get(k) for s in seeds]) for k in SCALARS})
        res["own_dreams_replayed_auroc"] = mean4(
            [(cells[(arm, s)].get("replay") or {}).get("dream_reward_auroc") for s in seeds]
        )
        tasks = sorted({t for s in seeds for t in probed[s].get("replay_by_task", {})})
        per_task = {}
        for t in tasks:
            rows = [
                probed[s]["replay_by_task"][t] for s in seeds if t in probed[s]["replay_by_task"]
            ]
            n = sum(r["episodes"] for r in rows)
            per_task[t] = {
                "episodes": n,
                "dreamed_success": round(
                    sum(r["dreamed_success"] * r["episodes"] for r in rows) / n, 4
                )
                if n
                else None,
                "real_success": round(sum(r["real_success"] * r["episodes"] for r in rows) / n, 4)
                if n
                else None,
                "reward_bal_acc_terminal": mean4(
                    [probed[s].get("reward_bal_acc_terminal_by_task", {}).get(t) for s in seeds]
                ),
                f"{arm} - imitation_matched": _gain(cells, arm, t, seeds),
                "real_only - imitation_matched": _gain(cells, "real_only", t, seeds),
            }
        res["per_task"] = per_task
        out[arm] = res
    if not out:
        raise ValueError("no DynaWeb cell with a probed world model (cell['wm_fidelity'])")
    return out


def _p(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _pts(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def markdown(res: dict) -> str:
    lines: list[str] = []
    for arm, r in res["arms"].items():
        lines += [
            f"### {arm} (seeds {', '.join(map(str, r['seeds']))}; the final world model on the probe)",
            "",
            f"- terminal reward balanced accuracy {r['reward_bal_acc_terminal']}; exact match "
            f'{r["exact_match"]} against {r["exact_match_baseline"]} for "nothing changes", '
            f"{r['exact_match_changed']} on the steps whose page changed",
            f"- predicts a change on {_p(r['change_rate_pred'])} of steps, the page changed on "
            f"{_p(r['change_rate_real'])}; outputs applied {_p(r['apply_rate'])}",
            f"- AUROC of its reward on the probe's episodes replayed through it "
            f"{r['replay_auroc']}; on the arm's own dreams replayed live "
            f"{r['own_dreams_replayed_auroc']}",
            "",
            f"| task | probe episodes | dreamed success | real success | terminal reward bal. acc. "
            f"| {arm} - imitation_matched | real_only - imitation_matched |",
            "|---|---|---|---|---|---|---|",
        ]
        for t, v in r["per_task"].items():
            lines.append(
                f"| {t} | {v['episodes']} | {_p(v['dreamed_success'])} | {_p(v['real_success'])} "
                f"| {v['reward_bal_acc_terminal']} | {_pts(v[f'{arm} - imitation_matched'])} "
                f"| {_pts(v['real_only - imitation_matched'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(out: str, md: str | None = None, as_json: bool = False) -> dict:
    """``dynaweb dream-fidelity OUT``: print the tables (``md``: also write them); returns the
    result (the ``--json`` line)."""
    res = {"out": str(out), "arms": dream_fidelity(read_cells(Path(out)))}
    return write_and_print(res, markdown(res), md, as_json)
