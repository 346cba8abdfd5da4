"""What explains a sample-efficiency cell's result, read from the run itself, and averaged per arm.

From the components' own /metrics (``core.metrics.scrape_targets``; the trainer keeps serving
them after its last step): the ``SELECTED`` series and, from the trainer only, its optimizer steps,
policy samples per source and the GSPO counters per source (the groups that reached the loss and
how many had a nonzero advantage), never recomputed from topics.  From the run's topics
(``topic_``): live and dreamed episodes and their success, a record of what was produced.
``diag_by_arm`` and ``per_task`` average the cells' diagnostics and final per-task success over
seeds for the report.
"""

from __future__ import annotations

from core.config import Config
from core.metrics import scrape_targets
from evaluation.studies.sample_efficiency.arm_names import ARMS
from evaluation.studies.sample_efficiency.report import (
    pooled_gspo,
    stale_counts,
    stale_share,
)

SELECTED = {  # metric -> key kept from a cell's last scrape (summed over label sets), for the diagnostics
    "dynaweb_stream_stale_dropped_trajectories_total": "stale_dropped",
    "dynaweb_stream_dead_letters_total": "dead_letters",
    "dynaweb_dream_world_model_invalid_total": "wm_invalid_outputs",
    "dynaweb_dream_steps_total": "dream_steps",
    "dynaweb_dream_rollouts_total": "dream_episodes",
    "dynaweb_stream_stale_dropped_dream_trajectories_total": "stream_dream_stale_dropped",
    "dynaweb_trainer_nonzero_advantage_share": "nonzero_advantage_share_last",
}
# the trainer's per-source counters of what reached the policy loss (models/metrics.py), by exposed sample
# name (a counter is exposed with ``_total``; both spellings of the two sums are accepted)
GSPO_COUNTERS = {
    "dynaweb_trainer_gspo_trajectories_total": "trajectories",
    "dynaweb_trainer_gspo_groups_total": "groups",
    "dynaweb_trainer_gspo_groups_nonzero_total": "groups_nonzero",
    "dynaweb_trainer_gspo_advantage_abs_total": "adv_abs_sum",
    "dynaweb_trainer_gspo_advantage_abs_sum_total": "adv_abs_sum",
    "dynaweb_trainer_gspo_clipped_total": "clipped",
    "dynaweb_trainer_gspo_ratio_total": "ratio_sum",
    "dynaweb_trainer_gspo_ratio_sum_total": "ratio_sum",
    "dynaweb_trainer_stale_dropped_total": "stale_dropped",
    "dynaweb_trainer_ungrouped_total": "ungrouped",
}


def parse_scrape(scraped: list[tuple[dict, str]]) -> dict:
    """The diagnostics kept from one scrape of a run's components (``(target labels, metrics text)``):
    the ``SELECTED`` series summed, and from the trainer only: its optimizer steps per model
    (``trainer_policy_steps``), policy samples per source (``trainer_samples_<source>``), the GSPO
    counters per source (``gspo``: {source: {groups, groups_nonzero, trajectories, ...}}) and its
    per-task trust in its world model at the end (``task_trust``: {task: {balanced_accuracy,
    calibration_gap, predicted, real, episodes, gated}}, ``models/dream/trust.py``)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict = {}
    gspo: dict = {}
    trust: dict = {}
    for labels, text in scraped:
        trainer = labels.get("component") == "trainer"
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                name, lab, v = smp.name, smp.labels, float(smp.value)
                key = SELECTED.get(name)
                if trainer and name == "dynaweb_trainer_steps_total":
                    key = f"trainer_{lab.get('model', '')}_steps"
                elif trainer and name == "dynaweb_trainer_samples_total":
                    model = "" if lab.get("model") == "policy" else "wm_"
                    key = f"trainer_{model}samples_{lab.get('source', '')}"
                elif trainer and name in GSPO_COUNTERS:
                    d = gspo.setdefault(lab.get("source", ""), {})
                    d[GSPO_COUNTERS[name]] = round(d.get(GSPO_COUNTERS[name], 0.0) + v, 4)
                    continue
                elif trainer and name == "dynaweb_trainer_task_trust":
                    trust.setdefault(lab.get("task", ""), {})[lab.get("measure", "")] = v
                    continue
                if key:
                    out[key] = round(out.get(key, 0.0) + v, 4)
    if gspo:
        out["gspo"] = gspo
    if trust:
        out["task_trust"] = dict(sorted(trust.items()))
    out.update(dream_stale(out))
    return out


def dream_stale(d: dict) -> dict:
    """Dreamed episodes dropped as stale (by the mixer and at train time) and their share of the
    dreamed episodes published (``dream_stale_share``; ``dream.pace`` keeps it low;
    ``report.stale_counts`` says where each count comes from); {} without dreams."""
    episodes, dropped = stale_counts(d)
    if not episodes:
        return {}
    return {
        "dream_stale_dropped": round(dropped, 4),
        "dream_stale_share": round(min(1.0, dropped / episodes), 4),
    }


def scrape_selected(cfg: Config) -> dict:
    """``parse_scrape`` of the run's live components, read from their /metrics now."""
    return parse_scrape(scrape_targets(cfg))


def topic_stats(cfg: Config) -> dict:
    """Read back from the run's topics (labelled ``topic_``: a record of what was produced, not of what
    the trainer learned from): live episodes and their success during training, dreamed rollouts and
    their success.  The GSPO group diagnostics come from the trainer's counters instead."""
    from evaluation.eval.sources import read_topic
    from streams.topics import Topics

    topics = Topics(cfg.run_id, cfg.kafka.partitions)
    out: dict = {}
    for name, topic in (("live", topics.real), ("dream", topics.dream)):
        try:
            trans = read_topic(cfg, topic, 60)
        except Exception as e:  # noqa: BLE001 - diagnostics only
            out[f"topic_{name}_error"] = str(e)[:200]
            continue
        last: dict = {}
        for t in trans:
            if t.done or t.truncated:
                last[t.episode_id] = t
        if (
            name == "dream" and trans
        ):  # every dream step, and those whose world-model output applied
            out["topic_dream_steps"] = len(trans)
            out["topic_dream_wm_ok"] = sum(1 for t in trans if (t.info or {}).get("wm_ok", True))
        out.update(
            {f"topic_{name}_{k}": v for k, v in episode_success(list(last.values())).items()}
        )
    return out


def episode_success(ends: list) -> dict:
    """Episodes (their last transitions) and the share that succeeded (raw reward > 0), overall and
    in the halves of the policy versions they were acted with (``early``: below the middle of the
    first and last version, ``late``: from it): whether the policy got better at what it trained on,
    on training seeds.  Empty: {}."""
    if not ends:
        return {}

    def share(xs: list) -> float | None:
        return round(sum(float(t.reward) > 0 for t in xs) / len(xs), 4) if xs else None

    vs = [int(t.policy_version) for t in ends]
    mid = (min(vs) + max(vs)) / 2.0
    return {
        "episodes": len(ends),
        "success": share(ends),
        "success_early": share([t for t in ends if t.policy_version < mid]),
        "success_late": share([t for t in ends if t.policy_version >= mid]),
    }


# per-cell diagnostics averaged over seeds: the trainer's own counters (policy steps, policy samples per
# source), the stream's and dream generator's counters, and what the run's topics held (``topic_``)
DIAG_KEYS = (
    "trainer_policy_steps",
    "trainer_samples_expert",
    "trainer_samples_real",
    "trainer_samples_dream",
    "trainer_wm_samples_expert",
    "trainer_wm_samples_real",
    "dream_steps",
    "dream_episodes",
    "dream_stale_dropped",
    "wm_invalid_outputs",
    "stale_dropped",
    "topic_live_episodes",
    "topic_live_success",
    "topic_live_success_early",
    "topic_live_success_late",
    "topic_dream_episodes",
    "topic_dream_success",
    "topic_dream_steps",
    "topic_dream_wm_ok",
)


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if isinstance(x, int | float)]
    return round(sum(xs) / len(xs), 3) if xs else None


def diag_by_arm(cells: list[dict]) -> dict:
    """Per arm, means over seeds of what explains a result: updates, live and dreamed success during
    training, world-model repairs, stale drops, the world model's fidelity on held-out real transitions
    next to the "nothing changes" baseline; and, from the trainer's counters pooled over seeds, the
    GSPO groups that reached the loss per source and the share with a nonzero advantage."""
    out: dict = {}
    for arm in ARMS:
        cs = [c for c in cells if c["arm"] == arm]
        if not cs:
            continue
        d: dict = {
            "train_s": _mean([c["train_s"] for c in cs]),
            "eval_s": _mean([c["eval_s"] for c in cs]),
            "live_steps": _mean([c["live_steps"] for c in cs]),
            "versions": _mean([len(c["history"]) for c in cs]),
        }
        for k in DIAG_KEYS:
            v = _mean([c.get("diagnostics", {}).get(k) for c in cs])
            if v is not None:
                d[k] = v
        share = stale_share([c.get("diagnostics", {}) for c in cs])  # pooled over seeds
        if share is not None:
            d["dream_stale_share"] = share
        pooled = pooled_gspo([c.get("diagnostics", {}).get("gspo") or {} for c in cs])
        for name, src in (("live", "real"), ("dream", "dream")):
            g = pooled.get(src, {})
            if g.get("groups"):
                d[f"trainer_{name}_groups"] = round(g["groups"] / len(cs), 3)
                d[f"trainer_{name}_nonzero_adv_share"] = round(
                    g.get("groups_nonzero", 0.0) / g["groups"], 4
                )
            if g.get("stale_dropped"):
                d[f"trainer_{name}_stale_dropped"] = round(g["stale_dropped"] / len(cs), 3)
            if g.get("ungrouped"):
                d[f"trainer_{name}_ungrouped"] = round(g["ungrouped"] / len(cs), 3)
        fids = [
            c["wm_fidelity"]["dynaweb_final"]
            for c in cs
            if c.get("wm_fidelity", {}).get("dynaweb_final")
        ]
        for k in (
            "exact_match",
            "change_f1",
            "baseline_exact_match",
            "baseline_change_f1",
            "ok_rate",
        ):
            v = _mean([f.get(k) for f in fids])
            if v is not None:
                d[f"wm_{k}"] = v
        out[arm] = d
    return out


def per_task(cells: list[dict]) -> dict:
    """arm -> task -> mean over seeds of the success at the arm's last point."""
    out: dict = {}
    for arm in ARMS:
        finals = [c["points"][-1].get("per_task", {}) for c in cells if c["arm"] == arm]
        tasks = sorted({t for f in finals for t in f})
        if tasks:
            out[arm] = {t: _mean([f.get(t) for f in finals]) for t in tasks}
    return out
