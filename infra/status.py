"""``dynaweb status``: a compact live view of a run, read from Prometheus.

Components up, real/dream/trainer rates, model versions (written, dreaming,
acting), success, world-model fidelity, stream lag, drops and firing alerts.
``--json`` prints the same as one JSON object.  Prometheus is read through
``core.prom`` (the client shared with ``infra.report`` and the monitoring checks).

Components are counted when their target answers (``up == 1``); a registered target
that does not answer is listed apart, never counted (the supervisor removes the
targets of dead components).  Totals survive component restarts: every process is
its own series (its ``pid`` label), so a total is the sum of each series' last value
over the run (``total()``), not of the live processes' counters, which a restart
starts again from 0.
"""

from __future__ import annotations

import json
import math
import time

from core.config import Config
from core.prom import Prom, prometheus_url
from infra.stack import RETENTION

# --- the live view ----------------------------------------------------------------------


def pick_run(prom: Prom, wanted: str | None) -> str | None:
    """``wanted`` if given; else the run whose components registered last."""
    if wanted:
        return wanted
    best, best_t = None, -1.0
    for r in prom.query('max by (run, registered_at) (up{job="dynaweb"})'):
        t = float(r["metric"].get("registered_at") or 0)
        if t > best_t:
            best, best_t = r["metric"].get("run"), t
    return best


def total(selector: str, by: str = "") -> str:
    """PromQL of a counter's total over the run, restarts included: the sum of every series'
    (every process's) last value within the Prometheus retention."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (last_over_time({selector}[{RETENTION}]))"


def observed_rate(
    prom: Prom, selector: str, window_s: float, at: float | None = None, by: str = ""
) -> dict[str, float]:
    """Per second, a counter's increase over the last ``window_s`` divided by the time actually
    observed, by label ``by`` (``""``: one key ``""``).  PromQL's ``rate`` divides by the whole
    window, so a run younger than the window read low (at 3 minutes, 451 policy updates per hour
    for a trainer running at 1,550/h).  The time observed is the window, or, when every process
    counted registered within it, the time since the first of them registered (its target's
    ``registered_at`` label, ``core.metrics``)."""
    now = time.time() if at is None else at
    acc: dict[str, tuple[float, float]] = {}
    for r in prom.query(f"increase({selector}[{int(window_s)}s])", at):
        v = float(r["value"][1])
        if math.isnan(v):
            continue
        key = r["metric"].get(by, "") if by else ""
        registered = float(r["metric"].get("registered_at") or 0) or now - window_s
        inc, first = acc.get(key, (0.0, now))
        acc[key] = (inc + v, min(first, registered))
    return {k: inc / min(window_s, max(now - first, 1.0)) for k, (inc, first) in acc.items()}


def components(prom: Prom, R: str, at: float | None = None) -> dict[str, dict]:
    """Per component: targets that answer (``up``, the count) and registered targets that do not
    (``not_answering``: hung, or dead with a target nobody removed)."""
    comps: dict[str, dict] = {}
    for r in prom.query(f'up{{job="dynaweb", {R}}}', at):
        c = comps.setdefault(r["metric"].get("component", "?"), {"up": 0, "not_answering": 0})
        c["up" if float(r["value"][1]) == 1 else "not_answering"] += 1
    return comps


def dream_pacing(q, R: str) -> dict:
    """Dreamed episodes over the run, those dropped as stale (by the mixer and by the trainer) and
    their share, and the pacing window's episodes in flight now (``dream.pace``)."""
    episodes = q(total(f"dynaweb_dream_rollouts_total{{{R}}}"))
    parts = (
        q(total(f"dynaweb_stream_stale_dropped_dream_trajectories_total{{{R}}}")),
        q(total(f'dynaweb_trainer_stale_dropped_total{{{R}, source="dream"}}')),
    )
    stale = None if all(p is None for p in parts) else sum(p or 0.0 for p in parts)
    return {
        "episodes": episodes,
        "stale_dropped": stale,
        "stale_share": min(1.0, stale / episodes) if episodes and stale is not None else None,
        "in_flight": q(f"sum(dynaweb_dream_in_flight_episodes{{{R}}})"),
        "pace_window": q(f"sum(dynaweb_dream_pace_window_episodes{{{R}}})"),
    }


def task_trust(prom: Prom, R: str, at: float | None = None) -> dict[str, dict]:
    """Per task, the trainer's trust in its world model (``models/dream/trust.py``): the newest
    value of each measure of ``dynaweb_trainer_task_trust`` (balanced accuracy, calibration gap,
    predicted and real success, episodes judged, gated)."""
    out: dict[str, dict] = {}
    for r in prom.query(f"max by (task, measure) (dynaweb_trainer_task_trust{{{R}}})", at):
        task, measure = r["metric"].get("task", "?"), r["metric"].get("measure", "?")
        out.setdefault(task, {})[measure] = float(r["value"][1])
    return dict(sorted(out.items()))


def gather(prom: Prom, run: str, at: float | None = None) -> dict:
    R = f'run="{run}"'
    W = 60.0  # the window of the live rates (s); the learner's updates per hour: 10 minutes
    q = lambda e: prom.value(e, at)  # noqa: E731
    rate = lambda sel, w=W: observed_rate(prom, sel, w, at).get("")  # noqa: E731
    out: dict = {"run": run, "prometheus": prom.url, "time": at or time.time()}
    out["components"] = components(prom, R, at)
    cols = {}
    for r in prom.query(f"max by (collector, policy) (dynaweb_collector_success_rate{{{R}}})", at):
        cols.setdefault(r["metric"]["collector"], {})["policy"] = r["metric"].get("policy")
    steps = observed_rate(prom, f"dynaweb_collector_steps_total{{{R}}}", W, at, by="collector")
    succ = prom.by(f"avg by (collector) (dynaweb_collector_success_rate{{{R}}})", "collector", at)
    eps = prom.by(total(f"dynaweb_collector_episodes_total{{{R}}}", "collector"), "collector", at)
    ver = prom.by(f"max by (collector) (dynaweb_collector_policy_version{{{R}}})", "collector", at)
    hb = prom.by(
        f"time() - max by (collector) (dynaweb_collector_heartbeat_timestamp_seconds{{{R}}})",
        "collector",
        at,
    )
    pol = {}
    for r in prom.query(f"count by (collector, policy) (dynaweb_collector_steps_total{{{R}}})", at):
        pol[r["metric"]["collector"]] = r["metric"].get("policy")
    for name in sorted(set(cols) | set(steps) | set(hb)):
        cols[name] = {
            "policy": pol.get(name) or cols.get(name, {}).get("policy"),
            "steps_per_s": steps.get(name),
            "episodes": eps.get(name),
            "success_rate": succ.get(name),
            "policy_version": ver.get(name),
            "heartbeat_age_s": hb.get(name),
        }
    out["collectors"] = cols
    out["dream"] = {
        "steps_per_s": rate(f"dynaweb_dream_steps_total{{{R}}}"),
        "steps": q(total(f"dynaweb_dream_steps_total{{{R}}}")),
        "policy_version": q(f'min(dynaweb_dream_model_version{{{R}, kind="policy"}})'),
        "world_model_version": q(f'min(dynaweb_dream_model_version{{{R}, kind="world_model"}})'),
        "success_rate": q(f"avg(dynaweb_dream_success_rate{{{R}}})"),
        "rate_factor": q(f"min(dynaweb_dream_rate_factor{{{R}}})"),
        **dream_pacing(q, R),
    }
    out["real_steps"] = q(total(f"dynaweb_collector_steps_total{{{R}}}"))
    out["trainer"] = {
        "policy_steps_per_s": rate(f'dynaweb_trainer_steps_total{{{R}, model="policy"}}'),
        "world_model_steps_per_s": rate(f'dynaweb_trainer_steps_total{{{R}, model="world_model"}}'),
        "policy_steps": q(total(f'dynaweb_trainer_steps_total{{{R}, model="policy"}}')),
        # the learner's rate: optimizer updates per hour over the last 10 minutes (or less)
        "policy_updates_per_h": per_h(
            rate(f'dynaweb_trainer_steps_total{{{R}, model="policy"}}', 600.0)
        ),
        "world_model_updates_per_h": per_h(
            rate(f'dynaweb_trainer_steps_total{{{R}, model="world_model"}}', 600.0)
        ),
        "checkpoint_version": q(f'max(dynaweb_trainer_checkpoint_version{{{R}, kind="policy"}})'),
        "checkpoint_age_s": q(
            f'time() - max(dynaweb_trainer_checkpoint_timestamp_seconds{{{R}, kind="policy"}})'
        ),
        "policy_loss": q(f'max(dynaweb_trainer_loss{{{R}, model="policy", term="total"}})'),
        "world_model_loss": q(
            f'max(dynaweb_trainer_loss{{{R}, model="world_model", term="total"}})'
        ),
    }
    out["learned_from"] = learned_from(prom, R, at)
    out["task_trust"] = task_trust(prom, R, at)
    out["fidelity"] = prom.by(
        f'max by (metric) (dynaweb_trainer_world_model_fidelity{{{R}, metric!="n"}})', "metric", at
    )
    out["stream"] = {
        "lag_batches": q(f"max(dynaweb_stream_lag_batches{{{R}}})"),
        "batches_per_min": per_h(rate(f"dynaweb_stream_batches_total{{{R}}}"), 60.0),
        "expert_fraction": q(f"avg(dynaweb_stream_expert_fraction_ratio{{{R}}})"),
        "stale_dropped_10m": q(
            f"sum(increase(dynaweb_stream_stale_dropped_trajectories_total{{{R}}}[10m]))"
        ),
        "dead_letters_10m": q(f"sum(increase(dynaweb_stream_dead_letters_total{{{R}}}[10m]))"),
    }
    out["alerts"] = sorted(
        {
            r["metric"].get("alertname", "?")
            for r in prom.query(f'ALERTS{{alertstate="firing", {R}}}', at)
        }
    )
    return out


def per_h(per_s: float | None, scale: float = 3600.0) -> float | None:
    return None if per_s is None else scale * per_s


def learned_from(prom: Prom, R: str, at: float | None = None, window: str = "10m") -> dict:
    """What the policy loss learned from, per source (the trainer's own counters, over ``window``):
    trajectories, groups, share of groups with a nonzero advantage, mean |advantage|, clipped share,
    mean importance ratio, stale drops at train time, trajectories refused for having no group."""

    def inc(name: str) -> dict[str, float]:
        return prom.by(
            f"sum by (source) (increase(dynaweb_trainer_{name}{{{R}}}[{window}]))", "source", at
        )

    traj, groups, nonzero = (
        inc("gspo_trajectories_total"),
        inc("gspo_groups_total"),
        inc("gspo_groups_nonzero_total"),
    )
    adv, clipped, ratio = (
        inc("gspo_advantage_abs_total"),
        inc("gspo_clipped_total"),
        inc("gspo_ratio_total"),
    )
    stale, ungrouped = inc("stale_dropped_total"), inc("ungrouped_total")

    def per(num: dict, den: dict, src: str) -> float | None:
        return num.get(src, 0.0) / den[src] if den.get(src) else None

    return {
        src: {
            "trajectories": traj.get(src),
            "groups": groups.get(src),
            "nonzero_adv_share": per(nonzero, groups, src),
            "adv_abs_mean": per(adv, traj, src),
            "clipped_share": per(clipped, traj, src),
            "ratio_mean": per(ratio, traj, src),
            "stale_dropped": stale.get(src),
            "ungrouped": ungrouped.get(src),
        }
        for src in ("real", "dream")
    }


def _n(v: float | None, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _pct(v: float | None) -> str:
    return _n(None if v is None else 100 * v, "{:.0f}%")


def render(s: dict) -> str:
    lines = [
        f"DynaWeb run {s['run']}  ({s['prometheus']}, {time.strftime('%H:%M:%S', time.localtime(s['time']))})"
    ]
    up = {k: v["up"] for k, v in sorted(s["components"].items()) if v["up"]}
    silent = {
        k: v["not_answering"] for k, v in sorted(s["components"].items()) if v["not_answering"]
    }
    comps = "  ".join(f"{k} {n}" for k, n in up.items()) or "none up"
    if silent:
        comps += (
            "  (registered, not answering: "
            + ", ".join(f"{k} {n}" for k, n in silent.items())
            + ")"
        )
    lines.append(f"components  {comps}")
    first = True
    for name, c in s["collectors"].items():
        lines.append(
            f"{'collectors' if first else '':11s} {name:28s} {c['policy'] or '?':7s} "
            f"{_n(c['steps_per_s'])} steps/s  episodes {_n(c['episodes'], '{:.0f}')}  "
            f"success {_pct(c['success_rate'])}  policy v{_n(c['policy_version'], '{:.0f}')}  "
            f"heartbeat {_n(c['heartbeat_age_s'], '{:.0f}')}s ago"
        )
        first = False
    if first:
        lines.append("collectors  none")
    d, t, st = s["dream"], s["trainer"], s["stream"]
    ratio = d["steps"] / s["real_steps"] if d["steps"] is not None and s["real_steps"] else None
    lines.append(
        f"dream       {_n(d['steps_per_s'])} steps/s  dream/real {_n(ratio)}  policy v{_n(d['policy_version'], '{:.0f}')}"
        f" world model v{_n(d['world_model_version'], '{:.0f}')}  predicted success {_pct(d['success_rate'])}"
        f"  rate {_n(d['rate_factor'])}"
    )
    lines.append(
        f"{'':11s} stale {_pct(d.get('stale_share'))} of {_n(d.get('episodes'), '{:.0f}')} dreamed "
        f"episodes ({_n(d.get('stale_dropped'), '{:.0f}')} dropped)  in flight "
        f"{_n(d.get('in_flight'), '{:.0f}')} / window {_n(d.get('pace_window'), '{:.0f}')}"
    )
    lines.append(
        f"trainer     policy {_n(t['policy_steps_per_s'], '{:.3f}')} steps/s ({_n(t['policy_steps'], '{:.0f}')} total)"
        f"  world model {_n(t['world_model_steps_per_s'], '{:.3f}')} steps/s  checkpoint "
        f"v{_n(t['checkpoint_version'], '{:.0f}')} ({_n(t['checkpoint_age_s'], '{:.0f}')}s ago)"
        f"  loss {_n(t['policy_loss'])} / wm {_n(t['world_model_loss'])}"
    )
    lines.append(
        f"learner     {_n(t.get('policy_updates_per_h'), '{:.0f}')} policy and "
        f"{_n(t.get('world_model_updates_per_h'), '{:.0f}')} world-model updates per hour "
        "(last 10 min)"
    )
    for src, lf in s.get("learned_from", {}).items():
        lines.append(
            f"{'GSPO (10m)' if src == 'real' else '':11s} {'live' if src == 'real' else 'dream':5s} "
            f"groups {_n(lf['groups'], '{:.0f}')}  with advantage {_pct(lf['nonzero_adv_share'])}  "
            f"|adv| {_n(lf['adv_abs_mean'])}  clipped {_pct(lf['clipped_share'])}  ratio "
            f"{_n(lf['ratio_mean'], '{:.3f}')}  stale {_n(lf['stale_dropped'], '{:.0f}')}  "
            f"ungrouped {_n(lf['ungrouped'], '{:.0f}')}"
        )
    f = s["fidelity"]
    lines.append(
        "fidelity    "
        + (
            "  ".join(
                f"{k} {_n(f[k])}"
                for k in ("exact_match", "change_f1", "baseline_change_f1", "reward_bal_acc")
                if k in f
            )
            or "not reported yet"
        )
    )
    first = True
    for task, m in s.get("task_trust", {}).items():
        gated = "trusted" if m.get("gated") else "held back"
        lines.append(
            f"{'trust' if first else '':11s} {task:28s} {gated:9s}  balanced accuracy "
            f"{_n(m.get('balanced_accuracy'))}  predicted {_pct(m.get('predicted'))} / real "
            f"{_pct(m.get('real'))} (gap {_n(m.get('calibration_gap'))})  over "
            f"{_n(m.get('episodes'), '{:.0f}')} episodes"
        )
        first = False
    lines.append(
        f"stream      lag {_n(st['lag_batches'], '{:.0f}')} batches  {_n(st['batches_per_min'], '{:.1f}')} batches/min"
        f"  expert fraction {_pct(st['expert_fraction'])}  stale drops {_n(st['stale_dropped_10m'], '{:.0f}')}"
        f" / dead letters {_n(st['dead_letters_10m'], '{:.0f}')} (10 min)"
    )
    lines.append("alerts      " + (", ".join(s["alerts"]) if s["alerts"] else "none firing"))
    return "\n".join(lines)


def status(
    cfg: Config,
    url: str | None = None,
    run: str | None = None,
    as_json: bool = False,
    at: float | None = None,
) -> int:
    prom = Prom(prometheus_url(cfg.stack, url))
    name = pick_run(prom, run)
    if name is None:
        print(
            f"no DynaWeb component is registered in {prom.url}"
            if not as_json
            else json.dumps({"run": None})
        )
        return 1
    s = gather(prom, name, at)
    print(json.dumps(s) if as_json else render(s))
    return 0 if any(c["up"] for c in s["components"].values()) else 1
