"""The share of a switch: two runs of ``dynaweb experiment sample-efficiency`` that differ in one
setting (for example ``experiment.instruction_match``), paired by arm and training seed.

``dynaweb ablation ON_OUT OFF_OUT`` reads the finished cells of both output directories (nothing
is rerun) and reports, for every arm both runs hold:

- its final success with the setting on and off, and ``on - off`` per seed, with the mean and a
  Student-t 95 % interval over the seeds both runs finished (the setting's share);
- the same difference per task (mean over those seeds);
- every within-run contrast of ``report.PAIRS`` both runs hold (``real_only - imitation_matched``),
  on and off, and how much the setting moves it (``(a - b)_on - (a - b)_off``, paired by seed).

Pure functions on cell dicts, no services.
"""

from __future__ import annotations

import json
from pathlib import Path

from evaluation.studies.sample_efficiency.arm_names import ARMS
from evaluation.studies.sample_efficiency.report import PAIRS, _r, difference_ci, mean_of


def read_cells(out: Path) -> dict[tuple[str, int], dict]:
    """(arm, seed) -> the cell of a study's output directory (``OUT/cells/ARM-sSEED.json``)."""
    d = Path(out) / "cells"
    if not d.is_dir():
        raise FileNotFoundError(
            f"{out}: no cells/ folder (the --out of `dynaweb experiment sample-efficiency`)"
        )
    cells = {}
    for f in sorted(d.glob("*-s*.json")):
        c = json.loads(f.read_text())
        if c.get("points"):
            cells[(c["arm"], int(c["seed"]))] = c
    return cells


def experiment_id(out: Path) -> str | None:
    f = Path(out) / "experiment.json"
    return json.loads(f.read_text()).get("experiment_id") if f.is_file() else None


def final(cell: dict) -> tuple[float, dict[str, float]]:
    """A cell's final success and its per-task success (its last evaluated point)."""
    p = cell["points"][-1]
    return float(p["success"]), {k: float(v) for k, v in (p.get("per_task") or {}).items()}


def paired(diffs: dict[int, float]) -> dict:
    """Mean of per-seed differences with a Student-t 95 % interval (None bounds with one seed)."""
    seeds = sorted(diffs)
    m, lo, hi = difference_ci([diffs[s] for s in seeds])
    return {
        "mean": _r(m, 4),
        "ci95": [_r(lo, 4), _r(hi, 4)],
        "per_seed": {s: _r(diffs[s], 4) for s in seeds},
        "seeds": len(seeds),
    }


def mean4(xs: list) -> float | None:
    """``report.mean_of`` rounded to 4 places (None without any number)."""
    return _r(mean_of(xs), 4)


def write_and_print(res: dict, text: str, md: str | None, as_json: bool) -> dict:
    """A read-only command's ending: the Markdown ``text`` written to ``md`` when given, printed
    unless ``as_json`` (the caller prints the JSON line); returns ``res``."""
    if md:
        Path(md).write_text(text)
    if not as_json:
        print(text)
    return res


def share(on: dict[tuple[str, int], dict], off: dict[tuple[str, int], dict]) -> dict:
    """The setting's share per arm and its effect on the within-run contrasts (module doc)."""
    arms: dict = {}
    for arm in ARMS:
        seeds = sorted(s for (a, s) in on if a == arm and (arm, s) in off)
        if not seeds:
            continue
        f_on = {s: final(on[(arm, s)]) for s in seeds}
        f_off = {s: final(off[(arm, s)]) for s in seeds}
        tasks = sorted(set.intersection(*(set(f_on[s][1]) & set(f_off[s][1]) for s in seeds)))
        arms[arm] = {
            "on": mean4([f_on[s][0] for s in seeds]),
            "off": mean4([f_off[s][0] for s in seeds]),
            "on - off": paired({s: f_on[s][0] - f_off[s][0] for s in seeds}),
            "per_task": {
                t: {
                    "on": mean4([f_on[s][1][t] for s in seeds]),
                    "off": mean4([f_off[s][1][t] for s in seeds]),
                    "on - off": mean4([f_on[s][1][t] - f_off[s][1][t] for s in seeds]),
                }
                for t in tasks
            },
        }
    contrasts: dict = {}
    for a, b in PAIRS:
        seeds = sorted(
            s for (x, s) in on if x == a and (b, s) in on and (a, s) in off and (b, s) in off
        )
        if not seeds:
            continue
        d_on = {s: final(on[(a, s)])[0] - final(on[(b, s)])[0] for s in seeds}
        d_off = {s: final(off[(a, s)])[0] - final(off[(b, s)])[0] for s in seeds}
        contrasts[f"{a} - {b}"] = {
            "on": paired(d_on),
            "off": paired(d_off),
            "on - off": paired({s: d_on[s] - d_off[s] for s in seeds}),
        }
    if not arms:
        raise ValueError("the two runs share no (arm, seed) cell")
    return {"arms": arms, "contrasts": contrasts}


def _pts(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def _ci(p: dict) -> str:
    lo, hi = p["ci95"]
    return "" if lo is None else f"[{_pts(lo)}, {_pts(hi)}]"


def markdown(res: dict) -> str:
    """The tables of ``share``'s result (points; 95 % Student-t over the paired seeds)."""
    lines = [
        f"Setting on: `{res.get('on_experiment')}` ({res.get('on')}); "
        f"off: `{res.get('off_experiment')}` ({res.get('off')}).",
        "",
        "| arm | on | off | on - off (points) | 95 % | per seed | seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, r in res["arms"].items():
        p = r["on - off"]
        per = ", ".join(_pts(v) for v in p["per_seed"].values())
        lines.append(
            f"| {arm} | {100 * r['on']:.1f} % | {100 * r['off']:.1f} % | {_pts(p['mean'])} | "
            f"{_ci(p) or '-'} | {per} | {p['seeds']} |"
        )
    if res["contrasts"]:
        lines += [
            "",
            "| contrast | on | off | on - off (points) |",
            "|---|---|---|---|",
        ]
        for name, c in res["contrasts"].items():
            lines.append(
                f"| {name} | {_pts(c['on']['mean'])} {_ci(c['on'])} | "
                f"{_pts(c['off']['mean'])} {_ci(c['off'])} | "
                f"{_pts(c['on - off']['mean'])} {_ci(c['on - off'])} |"
            )
    for arm, r in res["arms"].items():
        if not r["per_task"]:
            continue
        lines += [
            "",
            f"Per task, `{arm}` (mean over seeds):",
            "",
            "| task | on | off | on - off (points) |",
            "|---|---|---|---|",
        ]
        for t, v in r["per_task"].items():
            lines.append(
                f"| {t} | {100 * v['on']:.1f} % | {100 * v['off']:.1f} % | {_pts(v['on - off'])} |"
            )
    return "\n".join(lines) + "\n"


def main(on: str, off: str, out: str | None = None, as_json: bool = False) -> dict:
    """``dynaweb ablation ON_OUT OFF_OUT``: print the tables (and with ``out``, write them as
    Markdown); returns the result (the ``--json`` line)."""
    res = share(read_cells(Path(on)), read_cells(Path(off)))
    res = {
        "on": str(on),
        "off": str(off),
        "on_experiment": experiment_id(Path(on)),
        "off_experiment": experiment_id(Path(off)),
        **res,
    }
    return write_and_print(res, markdown(res), out, as_json)
