"""The figures of ``dynaweb experiment sample-efficiency``: pure functions, no services.

Input: the per-cell results (one JSON per (arm, seed), see ``evaluation.studies.sample_efficiency.study``).
Output: the rows of (arm, seed, real steps, policy steps, success), the aggregated
curves with Student-t 95% intervals over training seeds, the headline table (final
success, real interactions needed to reach the real-only arm's final success), the paired
differences of the study's contrasts and the per-arm summary (``arm_summary``: the ``--json``
line and ``summary.json``).  ``evaluation.studies.sample_efficiency.artifacts`` writes them
(CSV, PNG, Markdown page).
"""

from __future__ import annotations

import math
from collections import defaultdict

from evaluation.studies.sample_efficiency.arm_names import ARMS, DREAM_ARMS

LABELS = {
    "imitation": "Imitation only (K demos)",
    "imitation_matched": "Imitation, matched updates (online arms' steps and BC samples)",
    "real_only": "Real-only online GSPO",
    "dynaweb": "DynaWeb (dreamed GSPO groups)",
    "dynaweb_dream_only": "DynaWeb, dreams only (real data trains the world model only)",
}
CSV_FIELDS = (
    "arm",
    "seed",
    "point",
    "budget",
    "real_steps",
    "offline_real_steps",
    "policy_steps",
    "version",
    "success",
    "episodes",
    "timeouts",
)
SOURCES = (("live", "real"), ("dream", "dream"))  # summary key -> the trainer's ``source`` label

# two-sided 95% Student-t quantiles t_{0.975, df}
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (table, conservative between rows)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df in _T975:
        return _T975[df]
    if df > 30:
        return 1.96 if df > 120 else 2.0
    return _T975[max(k for k in _T975 if k <= df)]


def difference_ci(d: list[float]) -> tuple[float, float | None, float | None]:
    """Mean of paired differences and its Student-t 95 % interval, not clipped (a difference may
    be negative; None bounds with one value)."""
    m = sum(d) / len(d)
    if len(d) < 2:
        return m, None, None
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
    h = t975(len(d) - 1) * sd / math.sqrt(len(d))
    return m, m - h, m + h


def mean_ci(xs: list[float]) -> tuple[float, float | None, float | None]:
    """Mean and Student-t 95% interval over seeds (``None`` bounds with a single seed), clipped to [0, 1]."""
    if not xs:
        raise ValueError("no values")
    m, lo, hi = difference_ci(xs)
    return (m, None, None) if lo is None else (m, max(0.0, lo), min(1.0, hi))


PAIRS = (
    ("real_only", "imitation_matched"),
    ("dynaweb", "imitation_matched"),
    ("dynaweb", "real_only"),
    ("dynaweb_dream_only", "imitation_matched"),
    ("dynaweb_dream_only", "real_only"),
)


def paired_differences(rows: list[dict]) -> dict:
    """Per pair of arms (``PAIRS``, both present): the per-seed difference of final success (each
    cell's last point; the seeds both arms have), its mean and a Student-t 95% interval over those
    seeds (not clipped: a difference may be negative; [None, None] with one seed)."""
    final: dict[tuple, float] = {}
    for r in rows:  # rows are in point order within a cell: the last one wins
        final[(r["arm"], r["seed"])] = r["success"]
    out: dict = {}
    for a, b in PAIRS:
        seeds = sorted(s for (arm, s) in final if arm == a and (b, s) in final)
        if not seeds:
            continue
        d = [final[(a, s)] - final[(b, s)] for s in seeds]
        m, lo, hi = difference_ci(d)
        out[f"{a} - {b}"] = {
            "mean": _r(m, 4),
            "ci95": [_r(lo, 4), _r(hi, 4)],
            "per_seed": dict(zip(seeds, [_r(x, 4) for x in d], strict=True)),
        }
    return out


def rows_from_cells(cells: list[dict]) -> list[dict]:
    """One CSV row per evaluated point.  Every other arm starts from the imitation checkpoint, so its
    curve begins (point 0, 0 policy steps of its own) at the imitation result of the same seed.
    ``policy_steps``: optimizer steps the arm's own run had taken at that point (imitation: its BC steps)."""
    imit = {c["seed"]: c for c in cells if c["arm"] == "imitation"}
    rows = []
    for c in sorted(cells, key=lambda c: (ARMS.index(c["arm"]), c["seed"])):
        pts = list(c["points"])
        if c["arm"] != "imitation" and c["seed"] in imit:
            start = dict(imit[c["seed"]]["points"][-1], point=0, policy_steps=0, budget=None)
            pts = [start] + [dict(p, point=i + 1) for i, p in enumerate(pts)]
        for i, p in enumerate(pts):
            ps = p.get("policy_steps")
            rows.append(
                {
                    "arm": c["arm"],
                    "seed": c["seed"],
                    "point": p.get("point", i),
                    "budget": p.get("budget"),
                    "real_steps": int(p["real_steps"]),
                    # the world-model corpus this arm's world model was pretrained on (real steps
                    # spent before the run: the headline accounting adds them, the online one not)
                    "offline_real_steps": int(c.get("offline_real_steps", 0)),
                    "policy_steps": None if ps is None else int(ps),
                    "version": p["version"],
                    "success": round(float(p["success"]), 6),
                    "episodes": int(p["episodes"]),
                    "timeouts": int(p.get("timeouts", 0)),
                }
            )
    return rows


def aggregate(rows: list[dict]) -> dict[str, list[dict]]:
    """arm -> points (by index): mean real steps, mean success, 95% t-interval, n seeds."""
    by: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["arm"]][int(r["point"])].append(r)
    out: dict[str, list[dict]] = {}
    for arm in ARMS:
        if arm not in by:
            continue
        pts = []
        for k in sorted(by[arm]):
            rs = by[arm][k]
            m, lo, hi = mean_ci([r["success"] for r in rs])
            ps = [r["policy_steps"] for r in rs if r.get("policy_steps") is not None]
            pts.append(
                {
                    "point": k,
                    "real_steps": sum(r["real_steps"] for r in rs) / len(rs),
                    "offline_real_steps": sum(r.get("offline_real_steps", 0) for r in rs) / len(rs),
                    "success": m,
                    "ci_low": lo,
                    "ci_high": hi,
                    "n": len(rs),
                    "budget": rs[0]["budget"],
                    "policy_steps": sum(ps) / len(ps) if ps else None,
                    "timeouts": sum(r["timeouts"] for r in rs),
                    "episodes": sum(r["episodes"] for r in rs),
                }
            )
        out[arm] = pts
    return out


def every_real_step(agg: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The headline accounting: ``real_steps`` of every point plus the real transitions its
    arm's world model was pretrained on (``offline_real_steps``; 0 for the other arms).  The
    curves as aggregated (online steps and demonstrations only) are the online accounting."""
    return {
        arm: [dict(p, real_steps=p["real_steps"] + p.get("offline_real_steps", 0.0)) for p in c]
        for arm, c in agg.items()
    }


# A cell keeps its success at 4 decimals, so two arms with the same successes over the same
# episodes can have means apart by a few 1e-5 (stage 2 again: 0.397222 against 0.3972223).  Below
# half an episode of any evaluation here (1/120 per cell), so it counts as reaching.
REACH_TOL = 1e-4


def steps_to_reach(curve: list[dict], target: float) -> float | None:
    """Real steps at which a mean curve first reaches ``target`` (within ``REACH_TOL``; linear
    interpolation between points; the first point if it already does); ``None`` if it never
    does."""
    prev = None
    for p in curve:
        if p["success"] >= target - REACH_TOL:
            if prev is None or p["success"] <= target:  # (within REACH_TOL: no interpolation)
                return float(p["real_steps"])
            frac = (target - prev["success"]) / (p["success"] - prev["success"])
            return float(prev["real_steps"] + frac * (p["real_steps"] - prev["real_steps"]))
        prev = p
    return None


def headline(agg: dict[str, list[dict]]) -> dict:
    """Final success per arm and the real interactions each needs to reach the real-only arm's
    final success; ``ratio`` = DynaWeb's need / real-only's need (the paper claims about 1/3)."""
    out: dict = {"arms": {}, "target": None, "ratio": None}
    ro = agg.get("real_only")
    target = ro[-1]["success"] if ro else None
    out["target"] = target
    for arm, curve in agg.items():
        last = curve[-1]
        need = steps_to_reach(curve, target) if target is not None else None
        out["arms"][arm] = {
            "final_success": last["success"],
            "ci_low": last["ci_low"],
            "ci_high": last["ci_high"],
            "final_real_steps": last["real_steps"],
            "steps_to_target": need,
            "seeds": last["n"],
        }
    out["improved"] = bool(ro and target > ro[0]["success"] + 1e-12)
    out["ratios"] = {}
    for arm in DREAM_ARMS:
        if target is not None and arm in out["arms"] and out["improved"]:
            a = out["arms"][arm]["steps_to_target"]
            b = out["arms"]["real_only"]["steps_to_target"]
            out["ratios"][arm] = (a / b) if (a is not None and b) else None
    out["ratio"] = out["ratios"].get("dynaweb")
    return out


def pooled_gspo(per_cell: list[dict]) -> dict:
    """The trainer's GSPO counters (``{source: {groups, groups_nonzero, ...}}``, one dict per cell) summed
    over cells."""
    out: dict = {}
    for g in per_cell:
        for src, d in (g or {}).items():
            acc = out.setdefault(src, {})
            for k, v in d.items():
                if isinstance(v, int | float):
                    acc[k] = acc.get(k, 0.0) + v
    return out


def nonzero_adv_share(gspo: dict) -> dict:
    """Share of the GSPO groups that reached the trainer's loss with a nonzero advantage, per source:
    ``groups_nonzero / groups`` of the trainer's counters; ``live`` is the source ``real`` (on-policy
    rollouts in the browser), ``dream`` the dreamed ones; None where no group of that source reached it."""
    out: dict = {}
    for key, src in SOURCES:
        d = gspo.get(src) or {}
        n = float(d.get("groups", 0.0))
        out[key] = round(float(d.get("groups_nonzero", 0.0)) / n, 4) if n > 0 else None
    return out


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(float(x), nd)


def arm_summary(cells: list[dict], agg: dict[str, list[dict]] | None = None) -> dict:
    """Per arm (those with cells, in ``ARMS`` order), at its last point (online arms and
    ``imitation_matched``: the final checkpoint, ``online_policy_steps`` steps): ``final_success`` (mean
    over seeds), ``ci95`` ([low, high], Student-t 95% over seeds; [None, None] with one seed),
    ``real_steps`` and ``policy_steps`` (means over seeds; policy steps of the arm's own run),
    ``nonzero_adv_share`` ({"live", "dream"}: the trainer's counters pooled over seeds), ``seeds``,
    ``expert_samples_per_step`` (configured) and ``expert_samples_per_step_trained`` (the trainer's
    expert samples / its policy steps, mean over seeds; None when not scraped)."""
    agg = aggregate(rows_from_cells(cells)) if agg is None else agg
    out: dict = {}
    for arm in ARMS:
        curve = agg.get(arm)
        if not curve:
            continue
        cs = [c for c in cells if c["arm"] == arm]
        last = curve[-1]
        off = float(last.get("offline_real_steps", 0.0))
        gspo = pooled_gspo([c.get("diagnostics", {}).get("gspo") or {} for c in cs])
        per_step = []
        for c in cs:
            d = c.get("diagnostics", {})
            if d.get("trainer_policy_steps"):
                per_step.append(d.get("trainer_samples_expert", 0.0) / d["trainer_policy_steps"])
        cfg_eps = [
            c["expert_samples_per_step"] for c in cs if c.get("expert_samples_per_step") is not None
        ]
        out[arm] = {
            "final_success": _r(last["success"], 4),
            "ci95": [_r(last["ci_low"], 4), _r(last["ci_high"], 4)],
            "real_steps": _r(last["real_steps"] + off, 1),  # every real step (the headline)
            "real_steps_online": _r(last["real_steps"], 1),
            "online_real_steps": _r(last["real_steps"], 1),  # (the imagination study's name)
            "real_steps_offline": _r(off, 1),
            "policy_steps": _r(last.get("policy_steps"), 1),
            "nonzero_adv_share": nonzero_adv_share(gspo),
            "seeds": last["n"],
            "expert_samples_per_step": cfg_eps[0] if cfg_eps else None,
            "expert_samples_per_step_trained": _r(sum(per_step) / len(per_step), 2)
            if per_step
            else None,
            **imagination_summary(arm, cs),
        }
    return out


def mean_of(xs: list) -> float | None:
    """The mean of the numbers among ``xs`` (None, missing values, are skipped); None without any."""
    xs = [float(x) for x in xs if isinstance(x, int | float)]
    return sum(xs) / len(xs) if xs else None


def imagination_summary(arm: str, cs: list[dict]) -> dict:
    """What the world model and the dreams of an arm were (means over its cells): the real
    transitions its world model trained on (``world_model_steps_real``: the trainer's world-model
    samples of sources real and expert) and the dream steps made (read from the dream topic); for
    the dream arms, the final
    world model's fidelity on real transitions it never trained on (``wm_*``, the study's probe),
    the share of dream steps whose world-model output applied without repair
    (``dream_apply_rate``) and the replay check's AUROC of the dreamed reward against real success
    (``dream_reward_auroc``); None where a cell did not measure it."""
    diag = [c.get("diagnostics", {}) for c in cs]
    wm_real = [
        d.get("trainer_wm_samples_real", 0.0) + d.get("trainer_wm_samples_expert", 0.0)
        for d in diag
        if "trainer_wm_samples_real" in d or "trainer_wm_samples_expert" in d
    ]
    out = {
        "world_model_steps_real": _r(mean_of(wm_real), 1),
        "dream_steps": _r(mean_of([d.get("topic_dream_steps", 0.0) for d in diag]), 1),
    }
    if arm not in DREAM_ARMS:
        return out
    fids = [(c.get("wm_fidelity") or {}).get("dynaweb_final") or {} for c in cs]
    steps = sum(float(d.get("topic_dream_steps") or 0.0) for d in diag)
    bad = steps - sum(float(d.get("topic_dream_wm_ok") or 0.0) for d in diag)
    return {
        **out,
        "wm_reward_bal_acc": _r(mean_of([f.get("reward_bal_acc") for f in fids]), 4),
        "wm_exact_match": _r(mean_of([f.get("exact_match") for f in fids]), 4),
        "wm_exact_match_baseline": _r(mean_of([f.get("baseline_exact_match") for f in fids]), 4),
        "dream_apply_rate": _r(1.0 - bad / steps, 4) if steps else None,
        "dream_stale_share": stale_share(diag),
        "dream_reward_auroc": _r(
            mean_of([(c.get("replay") or {}).get("dream_reward_auroc") for c in cs]), 4
        ),
    }


def stale_counts(d: dict) -> tuple[float, float]:
    """A cell's (dreamed episodes published: the dreamer's counter, else the dream topic's count,
    as the dreamer is stopped before the final scrape; dropped as stale: by the mixer and at
    train time, unless ``dream_stale_dropped`` was recorded)."""
    episodes = float(d.get("dream_episodes") or d.get("topic_dream_episodes") or 0.0)
    if d.get("dream_stale_dropped") is not None:
        return episodes, float(d["dream_stale_dropped"])
    dropped = float(d.get("stream_dream_stale_dropped") or 0.0) + float(
        ((d.get("gspo") or {}).get("dream") or {}).get("stale_dropped") or 0.0
    )
    return episodes, dropped


def stale_share(diag: list[dict]) -> float | None:
    """Dreamed episodes dropped as stale over those dreamed, pooled over an arm's cells
    (``stale_counts``); None without dreams."""
    counts = [stale_counts(d) for d in diag] or [(0.0, 0.0)]
    episodes, dropped = (sum(x) for x in zip(*counts, strict=True))
    return _r(min(1.0, dropped / episodes), 4) if episodes else None
