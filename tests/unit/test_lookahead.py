"""Look-ahead acting (``models.dream.lookahead``): the policy's k best actions simulated in a world
model, the branch judged most likely to succeed taken.  A real policy (small, from config) and a
stand-in world model whose judgement the test sets."""

from __future__ import annotations

from dataclasses import replace

import torch

from evaluation.eval.policy import paired_difference
from models.dream.lookahead import LookaheadRunner
from models.lm.saved import make_model
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from models.world_model.outputs import Prediction
from tests.factories import POLICY_CFG, POLICY_PAGE


class Judge:
    """A world model that predicts the page unchanged and success exactly for ``winner``
    (``p_done`` 1 there, else 0); ``heads=False``: untrained heads (no probabilities)."""

    def __init__(self, winner: str = "", heads: bool = True, after: str = ""):
        self.winner, self.heads, self.after, self.rows = winner, heads, after, []

    def hit(self, obs, action) -> bool:
        if self.after:  # any action taken on the page ``after`` succeeds
            return obs.tree == self.after
        return action.to_text() == self.winner

    def predict(self, obs_list, actions, sample=False, temperature=1.0, abort=None):
        out = []
        for o, a in zip(obs_list, actions, strict=True):
            self.rows.append((o.tree, a.to_text()))
            hit = self.hit(o, a)
            nxt = replace(o, tree=self.after) if (self.after and not hit) else o
            p = (1.0 if hit else 0.0) if self.heads else None
            out.append(Prediction(nxt, p or 0.0, bool(hit), True, "", "", o.tree, 0.0, False, p, p))
        return out


def _policy() -> PolicyRunner:
    torch.manual_seed(0)
    model, tok = make_model(Policy, POLICY_CFG)
    return PolicyRunner(model, tok, POLICY_CFG, seed=0)


def test_the_distribution_is_what_greedy_acting_takes_the_argmax_of() -> None:
    r = _policy()
    acts, logps = r.distribution([POLICY_PAGE], [[]])[0]
    greedy = r.act([POLICY_PAGE], [[]], greedy=True)[0]
    assert acts[int(logps.argmax())].to_text() == greedy[0].to_text()
    assert abs(float(logps.max()) - greedy[1]) < 1e-6 and abs(float(logps.exp().sum()) - 1) < 1e-4


def test_look_ahead_takes_the_action_the_world_model_judges_successful() -> None:
    r = _policy()
    acts, logps = r.distribution([POLICY_PAGE], [[]])[0]
    order = [acts[i].to_text() for i in torch.argsort(logps, descending=True).tolist()]
    la = LookaheadRunner(r, Judge(winner=order[2]), k=3)
    a, lp, _ = la.act([POLICY_PAGE], [[]])[0]
    assert a.to_text() == order[2] and a.to_text() != order[0]
    assert abs(lp - float(logps[acts.index(a)])) < 1e-6  # the policy's log-prob of the action taken
    s = la.stats.summary()
    assert s["changed_share"] == 1.0 and s["wm_rows_per_decision"] <= 3
    assert s["mean_chosen_value"] == 1.0


def test_a_winner_outside_the_top_k_is_not_seen_and_greedy_stands() -> None:
    r = _policy()
    acts, logps = r.distribution([POLICY_PAGE], [[]])[0]
    order = [acts[i].to_text() for i in torch.argsort(logps, descending=True).tolist()]
    a, _, _ = LookaheadRunner(r, Judge(winner=order[3]), k=2).act([POLICY_PAGE], [[]])[0]
    assert a.to_text() == order[0]


def test_without_trained_heads_look_ahead_acts_greedily_and_says_so() -> None:
    r = _policy()
    greedy = r.act([POLICY_PAGE], [[]], greedy=True)[0][0].to_text()
    la = LookaheadRunner(r, Judge(heads=False), k=3)
    assert la.act([POLICY_PAGE], [[]])[0][0].to_text() == greedy
    assert la.stats.summary()["greedy_for_lack_of_heads"] == 1


def test_depth_two_judges_the_policy_s_next_step_on_the_predicted_page() -> None:
    """Every first action leads to a page on which any action succeeds: a branch is worth 1 only
    when the policy's next step there is simulated (depth 2), 0 at depth 1."""
    r = _policy()
    after = '[9] button "Done"'
    deep = LookaheadRunner(r, Judge(after=after), k=2, depth=2)
    deep.act([POLICY_PAGE], [[]])
    assert deep.stats.wm_calls == 2 and deep.stats.values == [1.0]
    assert deep.stats.policy_calls == 2  # the first page, then the predicted pages (batched)
    shallow = LookaheadRunner(r, Judge(after=after), k=2, depth=1)
    shallow.act([POLICY_PAGE], [[]])
    assert shallow.stats.values == [0.0] and shallow.stats.changed == 0


def test_the_paired_difference_pairs_episodes_by_task_and_seed() -> None:
    greedy = [{"task": "t", "seed": s, "success": s < 2} for s in range(4)]
    ahead = [{"task": "t", "seed": s, "success": s != 0} for s in range(4)]
    d = paired_difference(greedy, ahead)
    assert d["episodes"] == 4 and d["minus_greedy_points"] == 25.0  # (-1 + 0 + 1 + 1) / 4
    lo, hi = d["ci95_points"]
    assert lo < 25.0 < hi
    assert d["success_rate"] == 0.75 and d["greedy_success_rate"] == 0.5
