"""``dynaweb report --run ID --out DIR``: PNG plots and a Markdown summary of a run,
from the data Prometheus kept (the run may be live or finished).

Plots: success rate over real interactions, dream vs real steps, losses,
world-model fidelity, staleness (version gaps and the stale-drop share).
Counters are read per series (every process has its own ``instance``/``pid``
labels) and carried forward after a process ends, so restarts do not dent the
cumulative curves.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from core.prom import Prom

PLOTS = ("success_vs_real.png", "dream_vs_real.png", "losses.png", "fidelity.png", "staleness.png")


def run_span(prom: Prom, run: str, lookback_s: float = 30 * 86400) -> tuple[float, float]:
    """(first registration, last sample) of the run's components."""
    now = time.time()
    ser = prom.series(f'up{{job="dynaweb", run="{run}"}}', now - lookback_s, now)
    if not ser:
        raise ValueError(
            f"Prometheus has no data for run {run!r} (in the last {lookback_s / 86400:.0f} days)"
        )
    start = min(float(s.get("registered_at") or now) for s in ser)
    step = max(1.0, (now - start) / 2000)
    res = prom.range(f'count(up{{job="dynaweb", run="{run}"}})', start, now, step)
    end = max((float(v[0]) for r in res for v in r["values"]), default=now)
    return start - 2, min(now, end)


def _grid(start: float, end: float, points: int = 300) -> float:
    return max(1.0, (end - start) / points)


def series(
    prom: Prom, expr: str, start: float, end: float, step: float, by: str = ""
) -> dict[str, tuple[list, list]]:
    """label value of ``by`` (or the expression) -> (times, values)."""
    out: dict = {}
    for r in prom.range(expr, start, end, step):
        key = r["metric"].get(by, "") if by else ""
        ts, vs = out.setdefault(key, ([], []))
        for t, v in r["values"]:
            ts.append(float(t))
            vs.append(float(v))
    return out


def cumulative(
    prom: Prom, selector: str, start: float, end: float, step: float, by: str = ""
) -> dict[str, tuple]:
    """Sum of counter series grouped by ``by``, each series carried forward after it ends."""
    grid = [start + i * step for i in range(int((end - start) / step) + 1)]
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(grid))
    for r in prom.range(selector, start, end, step):
        vals = {round((float(t) - start) / step): float(v) for t, v in r["values"]}
        last = 0.0
        row = acc[r["metric"].get(by, "") if by else ""]
        for i in range(len(grid)):
            last = vals.get(i, last)
            row[i] += last
    return {k: (grid, v) for k, v in acc.items()}


def _at(ts: list, vs: list, t: float) -> float | None:
    """Value of a step function at time t (last point at or before t)."""
    best = None
    for x, v in zip(ts, vs, strict=True):
        if x <= t:
            best = v
        else:
            break
    return best


@dataclass
class _Window:
    """The run and the time grid every plot of one report reads."""

    prom: Prom
    run: str
    start: float
    end: float
    step: float

    @property
    def R(self) -> str:
        """The run's label matcher: ``run="<id>"``."""
        return f'run="{self.run}"'

    def minutes(self, ts: list) -> list[float]:
        """Minutes since the start."""
        return [(t - self.start) / 60 for t in ts]

    def series(self, expr: str, by: str = "") -> dict[str, tuple[list, list]]:
        return series(self.prom, expr, self.start, self.end, self.step, by=by)

    def cumulative(self, selector: str, by: str = "") -> dict[str, tuple]:
        return cumulative(self.prom, selector, self.start, self.end, self.step, by=by)


def _subplots(*args, **kw):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kw)


def write_report(
    prom: Prom, run: str, out_dir: str | Path, start: float | None = None, end: float | None = None
) -> dict:
    """The five ``PLOTS`` and ``summary.md`` of ``run`` in ``out_dir`` (the time span defaults
    to the run's own); returns the run, the span, the files written and the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if start is None or end is None:
        s0, e0 = run_span(prom, run)
        start, end = start or s0, end or e0
    w = _Window(prom, run, start, end, _grid(start, end))
    steps = w.cumulative(f"dynaweb_collector_steps_total{{{w.R}}}", by="policy")
    _plot_success(w, steps, out / PLOTS[0])
    dream = w.cumulative(f"dynaweb_dream_steps_total{{{w.R}}}")
    _plot_dream_vs_real(w, steps, dream, out / PLOTS[1])
    losses = _plot_losses(w, out / PLOTS[2])
    fid = _plot_fidelity(w, out / PLOTS[3])
    _plot_staleness(w, out / PLOTS[4])
    files = [out / name for name in PLOTS]

    summary = _summary(prom, run, start, end, steps, dream, losses, fid)
    md = out / "summary.md"
    md.write_text(_markdown(summary))
    return {
        "run": run,
        "start": start,
        "end": end,
        "files": [str(f) for f in files] + [str(md)],
        "summary": summary,
    }


def _plot_success(w: _Window, steps: dict, path: Path) -> None:
    """Success rate over real interactions (per policy), x = that policy's cumulative live steps."""
    succ = w.series(f"avg by (policy) (dynaweb_collector_success_rate{{{w.R}}})", by="policy")
    fig, ax = _subplots(figsize=(7, 4))
    for pol, (ts, vs) in sorted(succ.items()):
        g, cum = steps.get(pol, ([], []))
        xs = [_at(g, cum, t) or 0.0 for t in ts]
        ax.plot(xs, vs, label=f"{pol} policy", marker="." if len(vs) < 50 else None)
    ax.set(
        xlabel="real interactions (live browser steps of that policy)",
        ylabel="success rate (last 50 episodes)",
        title=f"Success over real interactions - run {w.run}",
        ylim=(-0.02, 1.02),
    )
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)


def _plot_dream_vs_real(w: _Window, steps: dict, dream: dict, path: Path) -> None:
    """Cumulative dreamed and real steps over time."""
    fig, ax = _subplots(figsize=(7, 4))
    for pol, (g, cum) in sorted(steps.items()):
        ax.plot(w.minutes(g), cum, label=f"real ({pol})")
    for _k, (g, cum) in dream.items():
        ax.plot(w.minutes(g), cum, label="dream", linestyle="--")
    ax.set(
        xlabel="minutes since start",
        ylabel="cumulative steps",
        title=f"Dreamed vs real steps - run {w.run}",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)


def _plot_losses(w: _Window, path: Path) -> dict:
    """The trainer's loss terms per model; returns the last value of each {model: {term: loss}}."""
    fig, axes = _subplots(1, 2, figsize=(10, 4))
    losses = {}
    for ax, model in zip(axes, ("policy", "world_model"), strict=True):
        ls = w.series(f'max by (term) (dynaweb_trainer_loss{{{w.R}, model="{model}"}})', by="term")
        losses[model] = {k: v[1][-1] for k, v in ls.items() if v[1]}
        for term, (ts, vs) in sorted(ls.items()):
            ax.plot(w.minutes(ts), vs, label=term)
        ax.set(xlabel="minutes since start", ylabel="loss", title=f"{model} loss")
        ax.grid(alpha=0.3)
        if ls:
            ax.legend(fontsize=8)
    fig.suptitle(f"Trainer losses - run {w.run}")
    _save(fig, path)
    return losses


def _plot_fidelity(w: _Window, path: Path) -> dict:
    """World-model fidelity on held-out real transitions; returns the series by metric."""
    fid = w.series(
        f'max by (metric) (dynaweb_trainer_world_model_fidelity{{{w.R}, metric!~"n|window_n"}})',
        by="metric",
    )
    fig, ax = _subplots(figsize=(7, 4))
    for m, (ts, vs) in sorted(fid.items()):
        ax.plot(w.minutes(ts), vs, label=m, linestyle=":" if m.startswith("baseline") else "-")
    ax.set(
        xlabel="minutes since start",
        ylabel="score on held-out real transitions",
        ylim=(-0.02, 1.02),
        title=f"World-model fidelity - run {w.run}",
    )
    ax.grid(alpha=0.3)
    if fid:
        ax.legend(fontsize=8, ncol=2)
    else:
        ax.text(0.5, 0.5, "no fidelity reported yet", ha="center", transform=ax.transAxes)
    _save(fig, path)
    return fid


def _plot_staleness(w: _Window, path: Path) -> None:
    """Staleness: the policy version gaps behind the trainer and the stale-drop share."""
    R = w.R
    ck = w.series(f'max(dynaweb_trainer_checkpoint_version{{{R}, kind="policy"}})')
    dv = w.series(f'min(dynaweb_dream_model_version{{{R}, kind="policy"}})')
    cv = w.series(f'min(dynaweb_collector_policy_version{{{R}, collector!~".*expert.*"}})')
    win = f"{max(60, int(5 * w.step))}s"
    share = w.series(
        f"sum(increase(dynaweb_stream_stale_dropped_trajectories_total{{{R}}}[{win}])) / "
        f'sum(increase(dynaweb_stream_trajectories_total{{{R}, source!="expert"}}[{win}]))'
    )
    fig, (a1, a2) = _subplots(1, 2, figsize=(10, 4))
    for name, other in (("dream generators", dv), ("latest-policy collectors", cv)):
        if "" in ck and "" in other:
            ts, vs = other[""]
            gap = [
                (_at(*ck[""], t) - v)
                for t, v in zip(ts, vs, strict=True)
                if _at(*ck[""], t) is not None
            ]
            a1.step(w.minutes(ts[len(ts) - len(gap) :]), gap, where="post", label=name)
    a1.set(
        xlabel="minutes since start",
        ylabel="versions behind the trainer",
        title="Policy version gap",
    )
    a1.grid(alpha=0.3)
    a1.legend(fontsize=8)
    for _k, (ts, vs) in share.items():
        a2.plot(w.minutes(ts), vs)
    a2.set(
        xlabel="minutes since start",
        ylabel=f"stale share ({win} window)",
        ylim=(-0.02, 1.02),
        title="Dream/on-policy trajectories dropped as stale",
    )
    a2.grid(alpha=0.3)
    fig.suptitle(f"Staleness - run {w.run}")
    _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _last(d: dict) -> dict:
    return {k: v[1][-1] for k, v in d.items() if v[1]}


def _summary(
    prom: Prom,
    run: str,
    start: float,
    end: float,
    steps: dict,
    dream: dict,
    losses: dict,
    fid: dict,
) -> dict:
    R = f'run="{run}"'
    span = f"{max(60, int(end - start) + 60)}s"

    def tot(sel: str, by: str = "") -> dict:
        query = (
            f"sum by ({by}) (max_over_time({sel}[{span}]))"
            if by
            else f"sum(max_over_time({sel}[{span}]))"
        )
        return prom.by(query, by or "__none__", end)

    eps = tot(f"dynaweb_collector_episodes_total{{{R}}}", "outcome")
    eps_pol = defaultdict(lambda: {"episodes": 0.0, "success": 0.0})
    for r in prom.query(
        f"sum by (policy, outcome) (max_over_time(dynaweb_collector_episodes_total{{{R}}}[{span}]))",
        end,
    ):
        p = eps_pol[r["metric"].get("policy", "?")]
        p["episodes"] += float(r["value"][1])
        if r["metric"].get("outcome") == "success":
            p["success"] += float(r["value"][1])
    real = {k: v[1][-1] for k, v in steps.items() if v[1]}
    dream_total = sum(v[1][-1] for v in dream.values() if v[1])
    trainer = tot(f"dynaweb_trainer_steps_total{{{R}}}", "model")
    val = lambda e: prom.value(e, end)  # noqa: E731
    return {
        "run": run,
        "start": start,
        "end": end,
        "duration_s": end - start,
        "real_steps": real,
        "dream_steps": dream_total,
        "dream_per_real": dream_total / sum(real.values()) if sum(real.values()) else None,
        "dream_per_policy_real": dream_total / real["latest"] if real.get("latest") else None,
        "episodes": eps,
        "success_by_policy": {
            k: v["success"] / v["episodes"] for k, v in eps_pol.items() if v["episodes"]
        },
        "trainer_steps": trainer,
        "checkpoint_version": val(
            f'max(max_over_time(dynaweb_trainer_checkpoint_version{{{R}, kind="policy"}}[{span}]))'
        ),
        "fidelity": _last(fid),
        "losses": losses,
        "stale_dropped": val(
            f"sum(max_over_time(dynaweb_stream_stale_dropped_trajectories_total{{{R}}}[{span}]))"
        ),
        "non_expert_trajectories": val(
            f'sum(max_over_time(dynaweb_stream_trajectories_total{{{R}, source!="expert"}}[{span}]))'
        ),
        "dead_letters": val(
            f"sum(max_over_time(dynaweb_stream_dead_letters_total{{{R}}}[{span}]))"
        ),
        "max_lag_batches": val(f"max(max_over_time(dynaweb_stream_lag_batches{{{R}}}[{span}]))"),
    }


def _f(v, fmt="{:.2f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _markdown(s: dict) -> str:
    t = lambda x: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(x))  # noqa: E731
    stale = (
        s["stale_dropped"] / s["non_expert_trajectories"]
        if s["stale_dropped"] is not None and s["non_expert_trajectories"]
        else None
    )
    lines = [
        f"# DynaWeb run `{s['run']}`",
        "",
        f"{t(s['start'])} to {t(s['end'])} ({s['duration_s'] / 60:.1f} min), from Prometheus.",
        "",
        "| | |",
        "|---|---|",
        "| real steps | "
        + (", ".join(f"{k}: {v:.0f}" for k, v in sorted(s["real_steps"].items())) or "-")
        + " |",
        f"| dream steps | {s['dream_steps']:.0f} |",
        f"| dream steps per real step | {_f(s['dream_per_real'])} (per latest-policy step: {_f(s['dream_per_policy_real'])}) |",
        "| episodes | "
        + (", ".join(f"{k}: {v:.0f}" for k, v in sorted(s["episodes"].items())) or "-")
        + " |",
        "| success by policy | "
        + (
            ", ".join(f"{k}: {100 * v:.0f}%" for k, v in sorted(s["success_by_policy"].items()))
            or "-"
        )
        + " |",
        "| trainer steps | "
        + (", ".join(f"{k}: {v:.0f}" for k, v in sorted(s["trainer_steps"].items())) or "-")
        + " |",
        f"| last policy checkpoint | v{_f(s['checkpoint_version'], '{:.0f}')} |",
        "| world-model fidelity (last) | "
        + (", ".join(f"{k} {v:.2f}" for k, v in sorted(s["fidelity"].items())) or "not reported")
        + " |",
        "| last losses | "
        + "; ".join(
            f"{m}: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(d.items()))
            for m, d in s["losses"].items()
            if d
        )
        + " |",
        f"| stale drops | {_f(s['stale_dropped'], '{:.0f}')} of {_f(s['non_expert_trajectories'], '{:.0f}')} "
        f"dream/on-policy trajectories ({_f(None if stale is None else 100 * stale, '{:.0f}%')}) |",
        f"| dead letters | {_f(s['dead_letters'], '{:.0f}')} |",
        f"| max training-batch lag | {_f(s['max_lag_batches'], '{:.0f}')} |",
        "",
    ]
    titles = (
        "Success over real interactions",
        "Dreamed vs real steps",
        "Losses",
        "World-model fidelity",
        "Staleness",
    )
    for title, f in zip(titles, PLOTS, strict=True):
        lines += [f"## {title}", "", f"![{title}]({f})", ""]
    return "\n".join(lines)
