"""A world model's stage-1 figures on held-out real transitions, and its targets.

``dynaweb eval world-model`` and ``dynaweb experiment world-model`` report, next to the
fidelity figures of ``models.world_model.scores.fidelity``:

* ``reward_bal_acc_terminal``: balanced accuracy of the predicted reward > 0 against the real
  reward > 0 on the *terminal* real transitions (``done``), where success or failure is decided;
  ``reward_bal_acc_terminal_by_task`` the same per task;
* ``exact_match_changed``: exact next-page match on the steps where the real page changes (the
  "nothing changes" baseline scores 0 there), and ``changed_steps`` how many there were;
* ``change_rate_pred`` / ``change_rate_real``: the share of steps the model predicts a change on,
  and the share that really change, over the same pairs;
* ``apply_rate``: the share of outputs that applied as written (``Prediction.ok``: no repair,
  no rejection);
* ``replay_auroc`` (``open_loop_replay``): each held-out episode's real action sequence is
  dreamed from its real first page, step by step on the world model's own predicted pages (a
  dream ends on ``stop``, a predicted ``done`` or the episode's real length, as
  ``models.dream.env`` ends one); its score is the reward head's p(success) at its last step
  (else its dreamed reward).  The AUROC of that score against the real episode's success is what
  ``dynaweb eval replay`` measures for a run's dreams (the same action sequence from the same task
  and seed, replayed live) without a policy in the loop: the real episode *is* the replay.

``check_targets`` compares them with the stage-1 thresholds (``TARGETS``).  Pure functions on
predictions and transitions, apart from ``open_loop_replay``, which calls the runner.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

TARGETS = {  # name: (figure, comparison, threshold)
    "reward_bal_acc_terminal": (">=", 0.90),
    "reward_bal_acc_terminal_every_task": (">=", 0.80),
    "exact_match_changed": (">=", 0.50),
    "exact_match_over_baseline": (">=", 0.10),
    "change_rate_gap": ("<=", 0.05),
    "apply_rate": (">=", 0.98),
    "replay_auroc": (">=", 0.80),
}


def _tree(o: Any) -> str:
    return o.tree if hasattr(o, "tree") else o["tree"]


def _bal_acc(pred: list[bool], real: list[bool]) -> float | None:
    from models.world_model.scores import balanced_accuracy

    return balanced_accuracy(pred, real) if real else None


def stage1_figures(preds: list, transitions: list) -> dict:
    """The figures above (all but the replay AUROC) from one prediction per transition."""
    assert len(preds) == len(transitions), (len(preds), len(transitions))
    n = len(preds)
    obs = [_tree(t.obs) for t in transitions]
    real = [_tree(t.next_obs) for t in transitions]
    pred = [p.next_obs.tree for p in preds]
    changed = [r != o for r, o in zip(real, obs, strict=True)]
    hit = [p == r for p, r in zip(pred, real, strict=True)]
    n_changed = sum(changed)
    term = [i for i, t in enumerate(transitions) if t.done]
    by_task: dict[str, list[int]] = defaultdict(list)
    for i in term:
        by_task[transitions[i].task].append(i)

    def bal(idx: list[int]) -> float | None:
        return _bal_acc(
            [float(preds[i].reward) > 0 for i in idx],
            [float(transitions[i].reward) > 0 for i in idx],
        )

    exact = sum(hit) / max(1, n)
    base_exact = sum(not c for c in changed) / max(1, n)
    rate_pred = sum(p != o for p, o in zip(pred, obs, strict=True)) / max(1, n)
    return {
        "n": n,
        "terminal_steps": len(term),
        "terminal_successes": sum(float(transitions[i].reward) > 0 for i in term),
        "reward_bal_acc_terminal": bal(term),
        "reward_bal_acc_terminal_by_task": {k: bal(v) for k, v in sorted(by_task.items())},
        "changed_steps": n_changed,
        "exact_match_changed": (
            sum(h for h, c in zip(hit, changed, strict=True) if c) / n_changed
            if n_changed
            else None
        ),
        "exact_match": exact,
        "exact_match_baseline": base_exact,
        "exact_match_over_baseline": exact - base_exact,
        "change_rate_pred": rate_pred,
        "change_rate_real": n_changed / max(1, n),
        "apply_rate": sum(bool(p.ok) for p in preds) / max(1, n),
    }


def episodes_from_start(transitions: list) -> list[list]:
    """Whole held-out episodes (steps 0, 1, ... without a gap), each sorted by step."""
    eps: dict[str, list] = defaultdict(list)
    for t in transitions:
        eps[t.episode_id].append(t)
    out = []
    for steps in eps.values():
        steps.sort(key=lambda t: t.step)
        if [t.step for t in steps] == list(range(len(steps))):
            out.append(steps)
    return sorted(out, key=lambda s: s[0].episode_id)


def episode_succeeded(steps: list) -> bool:
    last = steps[-1]
    return bool(last.done and float(last.reward) > 0)


def open_loop_replay(runner: Any, transitions: list, batch: int = 16) -> dict:
    """Dream every whole held-out episode's real actions from its real first page (see the module
    doc); the AUROC of the dreamed score against real success, and dreamed against real success
    per task."""
    from core.spaces import Observation, parse_action
    from evaluation.eval.replay import auroc
    from models.dream.env import dream_outcome

    eps = episodes_from_start(transitions)
    pages = [Observation.from_dict(e[0].obs) for e in eps]
    score = [0.0] * len(eps)
    live = list(range(len(eps)))
    k = 0
    while live:
        ask, nxt_live = [], []
        for i in live:
            try:
                act = parse_action(eps[i][k].action)
            except ValueError:
                continue  # an action the environment could not take ends the dream
            fixed = dream_outcome(pages[i], act)
            if fixed is not None:
                pages[i], done, _ = fixed
                score[i] = 0.0
                if not done and k + 1 < len(eps[i]):
                    nxt_live.append(i)
            else:
                ask.append((i, act))
        for j in range(0, len(ask), batch):
            chunk = ask[j : j + batch]
            preds = runner.predict([pages[i] for i, _ in chunk], [a for _, a in chunk])
            for (i, _), p in zip(chunk, preds, strict=True):
                pages[i] = p.next_obs
                score[i] = float(p.p_success if p.p_success is not None else p.reward)
                if not p.done and k + 1 < len(eps[i]):
                    nxt_live.append(i)
        live, k = sorted(nxt_live), k + 1
    real = [episode_succeeded(e) for e in eps]
    per_task: dict[str, dict] = defaultdict(lambda: {"episodes": 0, "dreamed": 0, "real": 0})
    for e, s, r in zip(eps, score, real, strict=True):
        row = per_task[e[0].task]
        row["episodes"] += 1
        row["dreamed"] += int(s > 0.5)
        row["real"] += int(r)
    return {
        "replay_auroc": auroc(score, real),
        "replay_episodes": len(eps),
        "replay_real_successes": sum(real),
        "replay_agreement": sum((s > 0.5) == r for s, r in zip(score, real, strict=True))
        / max(1, len(eps)),
        "replay_by_task": {
            t: {
                "episodes": v["episodes"],
                "dreamed_success": v["dreamed"] / v["episodes"],
                "real_success": v["real"] / v["episodes"],
            }
            for t, v in sorted(per_task.items())
        },
    }


def check_targets(fig: dict) -> dict:
    """Per target: the measured value, the threshold and whether it is met (None: not measured)."""
    by_task = [
        v for v in (fig.get("reward_bal_acc_terminal_by_task") or {}).values() if v is not None
    ]
    rp, rr = fig.get("change_rate_pred"), fig.get("change_rate_real")
    values = {
        "reward_bal_acc_terminal": fig.get("reward_bal_acc_terminal"),
        "reward_bal_acc_terminal_every_task": min(by_task) if by_task else None,
        "exact_match_changed": fig.get("exact_match_changed"),
        "exact_match_over_baseline": fig.get("exact_match_over_baseline"),
        "change_rate_gap": abs(rp - rr) if rp is not None and rr is not None else None,
        "apply_rate": fig.get("apply_rate"),
        "replay_auroc": fig.get("replay_auroc"),
    }
    out = {}
    for name, (op, thr) in TARGETS.items():
        v = values[name]
        met = None if v is None else (v >= thr if op == ">=" else v <= thr)
        out[name] = {
            "value": None if v is None else round(float(v), 4),
            "target": f"{op} {thr:g}",
            "met": met,
        }
    return out


def format_targets(targets: dict) -> list[str]:
    lines = [f"{'stage-1 target':36s} {'value':>8s} {'target':>8s}  met"]
    for name, r in targets.items():
        v = "-" if r["value"] is None else f"{r['value']:.3f}"
        met = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
        lines.append(f"{name:36s} {v:>8s} {r['target']:>8s}  {met}")
    return lines
