"""Stage-1 figures of a world model (evaluation.eval.world_model_targets): pure functions on hand-built cases."""

from __future__ import annotations

from core.spaces import Observation
from evaluation.eval.world_model_targets import (
    check_targets,
    episodes_from_start,
    open_loop_replay,
    stage1_figures,
)
from models.world_model.outputs import Prediction
from streams.records import Transition

PAGE = '[1] button "OK"\n[2] button "Cancel"'
DONE_PAGE = "[3] text 'Done'"


def tr(ep, step, action, nxt, reward=0.0, done=False, task="miniwob/click-button"):
    return Transition(
        run_id="r",
        episode_id=ep,
        step=step,
        task=task,
        seed=0,
        source="real",
        policy_version=0,
        world_model_version=0,
        obs={"instruction": "Click OK", "tree": PAGE},
        action=action,
        next_obs={"instruction": "Click OK", "tree": nxt},
        reward=reward,
        done=done,
    )


def pred(tree, reward=0.0, done=False, ok=True, p_success=None):
    return Prediction(
        next_obs=Observation("Click OK", "", tree),
        reward=reward,
        done=done,
        ok=ok,
        reason="",
        text="",
        obs_tree=PAGE,
        p_success=p_success,
    )


def test_stage1_figures_count_changed_steps_terminal_rewards_and_apply_rate():
    ts = [
        tr("a", 0, "click(1)", DONE_PAGE, 1.0, True),  # changes, success
        tr("b", 0, "click(2)", DONE_PAGE, -1.0, True),  # changes, failure
        tr("c", 0, "click(1)", PAGE),  # no change
        tr("d", 0, "click(1)", PAGE, task="miniwob/click-link"),  # no change
    ]
    ps = [
        pred(DONE_PAGE, 1.0, True),  # right change, right reward
        pred(PAGE, 1.0, True, ok=False),  # missed change, wrong reward, repaired
        pred(PAGE),  # right
        pred(DONE_PAGE),  # invented change
    ]
    f = stage1_figures(ps, ts)
    assert f["terminal_steps"] == 2 and f["terminal_successes"] == 1
    assert f["reward_bal_acc_terminal"] == 0.5  # success recalled, failure not
    assert f["reward_bal_acc_terminal_by_task"] == {"miniwob/click-button": 0.5}
    assert f["changed_steps"] == 2 and f["exact_match_changed"] == 0.5
    assert f["exact_match"] == 0.5 and f["exact_match_baseline"] == 0.5
    assert f["exact_match_over_baseline"] == 0.0
    assert f["change_rate_pred"] == 0.5 and f["change_rate_real"] == 0.5
    assert f["apply_rate"] == 0.75
    t = check_targets(f)
    assert t["exact_match_changed"]["met"] is True
    assert t["reward_bal_acc_terminal"]["met"] is False
    assert t["change_rate_gap"] == {"value": 0.0, "target": "<= 0.05", "met": True}
    assert t["apply_rate"]["met"] is False
    assert t["replay_auroc"]["met"] is None  # not measured: neither met nor failed


def test_episodes_from_start_keeps_only_whole_episodes_in_step_order():
    ts = [tr("a", 1, "click(1)", PAGE), tr("a", 0, "click(1)", PAGE), tr("b", 1, "click(1)", PAGE)]
    eps = episodes_from_start(ts)
    assert [[t.step for t in e] for e in eps] == [[0, 1]]


class FakeRunner:
    """Predicts success (p 0.9) only for click(1), and done on every call."""

    def __init__(self):
        self.calls = []

    def predict(self, obs_list, actions):
        self.calls.append([a.to_text() for a in actions])
        return [
            pred(
                DONE_PAGE,
                1.0 if a.element == 1 else 0.0,
                True,
                p_success=0.9 if a.element == 1 else 0.2,
            )
            for a in actions
        ]


def test_open_loop_replay_scores_each_real_episode_on_dreamed_pages():
    ts = [
        tr("win", 0, "click(1)", DONE_PAGE, 1.0, True),
        tr("lose", 0, "click(2)", DONE_PAGE, -1.0, True),
        # a stop ends the dream with score 0, without the world model
        tr("quit", 0, "stop()", PAGE, 0.0, True),
        # element 7 is not on the page: refused, page unchanged; then click(1) is asked
        tr("late", 0, "click(7)", PAGE),
        tr("late", 1, "click(1)", DONE_PAGE, -1.0, True),
    ]
    r = FakeRunner()
    out = open_loop_replay(r, ts)
    assert out["replay_episodes"] == 4 and out["replay_real_successes"] == 1
    # scores: late 0.9 (a failure), lose 0.2, quit 0.0, win 0.9: the success ties one failure
    # and beats two of three
    assert abs(out["replay_auroc"] - (2 + 0.5) / 3) < 1e-9
    assert sorted(sum(r.calls, [])) == ["click(1)", "click(1)", "click(2)"]
    assert out["replay_by_task"]["miniwob/click-button"]["episodes"] == 4
