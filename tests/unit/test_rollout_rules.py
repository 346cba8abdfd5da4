"""Live and dreamed episodes end by the same rules; live groups are named at the source."""

from __future__ import annotations

import torch

from collectors.agents import ExpertAgent, RandomAgent
from collectors.perturbed import PerturbedExpertAgent
from collectors.schedule import _Schedule, collector_group_size
from collectors.tasks import resolve_tasks
from core.config import Config
from core.spaces import Action, precheck_error
from models.dream.env import DreamEnv, dream_outcome, dream_rollouts
from models.policy.runner import sampler_generator
from tests.factories import TWO_BUTTONS as PAGE


class NoWorldModel:
    """The world model must not be asked for what needs no prediction."""

    calls = 0

    def predict(self, obs, acts, sample=False):
        NoWorldModel.calls += len(acts)
        raise AssertionError(f"world model asked for {[a.to_text() for a in acts]}")


def test_precheck_errors_match_the_live_environment():
    assert precheck_error(Action.click(7), {1, 2}) == "element [7] is not on the page"
    assert precheck_error(Action.click(1), {1, 2}) == ""
    assert precheck_error(Action.press("Bogus"), set()).startswith("unknown key 'Bogus'")
    assert precheck_error(Action.press("a"), set()) == ""


def test_stop_ends_a_dream_with_reward_zero_and_the_page_unchanged():
    env = DreamEnv(NoWorldModel(), max_steps=5)
    env.reset(PAGE, "t", 0)
    obs, reward, term, trunc, info = env.step("stop()")
    assert (
        term and not trunc and reward == 0.0 and obs.tree == PAGE.tree and info["reason"] == "stop"
    )


def test_refused_action_carries_the_live_error_line_into_the_dream():
    nxt, done, reason = dream_outcome(PAGE, Action.click(9))
    assert not done and reason == "refused" and nxt.tree == PAGE.tree
    assert nxt.last_action_error == "element [9] is not on the page"
    assert "Error: element [9] is not on the page" in nxt.render()
    assert dream_outcome(PAGE, Action.click(1)) is None


class StopPolicy:
    def act_info(self, obs, hists, temperature=1.0, greedy=False):
        return [(Action.stop(""), -0.5, 2, {}) for _ in obs]


def test_dream_rollouts_end_on_stop_without_the_world_model():
    ros = dream_rollouts(StopPolicy(), NoWorldModel(), [PAGE], group_size=3, horizon=4)
    assert len(ros) == 3 and all(
        len(ro) == 1 and ro[0]["done"] and ro[0]["reward"] == 0.0 for ro in ros
    )


def test_live_groups_get_one_id_at_the_source():
    tasks = resolve_tasks(["miniwob/click-button", "miniwob/enter-text"])
    s = _Schedule(tasks, 0, 1000, offset=0, limit=0, run_length=8, group_size=3, group_prefix="c1")
    ids = []
    for i in range(6):
        s.next(slot=i % 2)
        ids.append(s.group_id)
    assert ids[:3] == ["g:c1:1"] * 3 and ids[3:] == ["g:c1:2"] * 3
    solo = _Schedule(tasks, 0, 1000, offset=0, limit=0, run_length=8, group_size=1)
    solo.next(0)
    assert solo.group_id == ""


def test_a_live_group_is_closed_short_when_the_policy_moves_past_max_staleness():
    tasks = resolve_tasks(["miniwob/click-button", "miniwob/enter-text"])
    v = [0]
    s = _Schedule(tasks, 0, 1000, offset=0, limit=0, run_length=8, group_size=4,
                  group_prefix="c1", version=lambda: v[0], max_staleness=2)  # fmt: skip
    seen = []
    for version in (0, 1, 2, 3, 3, 3, 3, 3):
        v[0] = version
        cuts = s.starts_group()
        seen.append((s.next(0), s.group_id, s.group_version, cuts))
    ids = [g for _, g, _, _ in seen]
    # v0 -> v2 stays one group (2 apart); v3 is 3 past the group's v0: closed short, a new group
    assert ids[:3] == ["g:c1:1"] * 3 and ids[3:7] == ["g:c1:2"] * 4 and ids[7] == "g:c1:3"
    assert s.groups_cut == 1 and seen[3][2] == 3 and seen[3][3]
    assert seen[3][0][0].name != seen[0][0][0].name  # the next group's task, as a full group
    # each group's versions stay within max_staleness
    by_group: dict[str, list[int]] = {}
    for (_, g, _, _), version in zip(seen, (0, 1, 2, 3, 3, 3, 3, 3), strict=True):
        by_group.setdefault(g, []).append(version)
    assert all(max(vs) - min(vs) <= 2 for vs in by_group.values())


def test_collector_group_size_auto():
    cfg = Config()
    assert cfg.collector.group_size == 0  # auto
    assert collector_group_size(cfg, "real", object()) == cfg.stream.group_size  # a sampling policy
    assert collector_group_size(cfg, "expert", ExpertAgent()) == 1
    assert collector_group_size(cfg, "real", RandomAgent()) == 1
    # the perturbed expert's episodes carry no behaviour log-probs: one per seed, not groups
    assert collector_group_size(cfg, "real", PerturbedExpertAgent(ExpertAgent())) == 1
    cfg.collector.group_size = 5
    assert collector_group_size(cfg, "real", RandomAgent()) == 5


def test_sampler_streams_differ_by_producer_and_are_reproducible():
    a = torch.rand(4, generator=sampler_generator("run", "dream-1"))
    b = torch.rand(4, generator=sampler_generator("run", "dream-2"))
    a2 = torch.rand(4, generator=sampler_generator("run", "dream-1"))
    assert not torch.equal(a, b) and torch.equal(a, a2)


class ClickPolicy:
    """Clicks [1] in the first rollout of a group and [2] in the others."""

    def act_info(self, obs, hists, temperature=1.0, greedy=False):
        return [(Action.click(1 if k == 0 else 2), -0.5, 2, {}) for k in range(len(obs))]


class HeadWorldModel:
    """Heads as ``WorldModelRunner.predict`` applies them: [1] p(success) 0.9, [2] 0.2; always done."""

    def predict(self, obs, acts, sample=False):
        from models.world_model.outputs import Prediction

        ps = [0.9 if a.element == 1 else 0.2 for a in acts]
        return [
            Prediction(o, float(p > 0.5), True, True, "", "", p_success=p)
            for o, p in zip(obs, ps, strict=True)
        ]


def test_dream_steps_carry_p_success_and_the_dreamer_counts_groups_and_ends():
    from models.dream.groups import group_outcomes, rollout_end

    ros = dream_rollouts(ClickPolicy(), HeadWorldModel(), [PAGE], group_size=3, horizon=2, batch=3)
    assert [ro[-1]["p_success"] for ro in ros] == [0.9, 0.2, 0.2] and [ro.reward for ro in ros] == [
        1.0,
        0.0,
        0.0,
    ]
    assert [rollout_end(ro) for ro in ros] == ["done"] * 3
    assert group_outcomes(ros) == {"varied": 1, "uniform": 0}
    # the same head probability everywhere: every rollout gets the same reward, no advantage
    same = dream_rollouts(StopPolicy(), NoWorldModel(), [PAGE, PAGE], group_size=2, horizon=2)
    assert group_outcomes(same) == {"varied": 0, "uniform": 2}
    assert {rollout_end(ro) for ro in same} == {"stop"} and all(
        ro[-1]["p_success"] is None for ro in same
    )


def test_keep_varied_publishes_only_groups_with_a_nonzero_advantage():
    from models.dream.groups import keep_varied

    # group 1: rewards differ (p_success 0.9, 0.2, 0.2); groups 2-3: every rollout stops, reward 0
    varied = dream_rollouts(ClickPolicy(), HeadWorldModel(), [PAGE], group_size=3, horizon=2)
    same = dream_rollouts(StopPolicy(), NoWorldModel(), [PAGE, PAGE], group_size=2, horizon=2)
    kept, dropped = keep_varied(same + varied)
    assert dropped == 2
    assert kept == varied and len({ro.group_id for ro in kept}) == 1
    assert keep_varied(same) == ([], 2)
