"""The world model at decision time: look-ahead acting.

Before acting on a real page, the policy's ``k`` most likely candidate actions are each simulated
in the world model (``depth`` steps: the candidate, then the policy's greedy action on each
predicted page), and the action whose branch the world model judges most likely to end in success
is taken (WebDreamer, WMA and WebEvolver use their world models so).  A branch's value is
``p(done) x p(success)`` of its last simulated step, read from the world model's trained reward and
done heads; a branch that ``stop``s, or whose action the live page would refuse
(``models.dream.env.dream_outcome``), ends there with value 0.  Ties (and every branch at 0) go to
the policy's own order, so look-ahead never does worse than greedy where the world model has no
opinion.  A world model whose heads are not trained has no opinion at all: the runner then acts
greedily and says so (``stats["no_heads"]``).

``LookaheadRunner`` has the acting interface of ``models.policy.runner.PolicyRunner`` (``act``,
``act_info``), so the live evaluation (``dynaweb eval policy --lookahead K``) and the collectors
can use it in place of the policy.  Its cost is counted in ``stats``: decisions, world-model
prediction calls and rows, policy calls and seconds, and how often it changed the greedy action.
The recorded log-prob is the policy's ``log pi_T`` of the chosen action (what a learner would
use), not of the look-ahead's choice rule: look-ahead is for evaluation and acting, not for
on-policy groups.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from core.spaces import Action, Observation
from models.dream.env import dream_outcome


class Distribution(Protocol):
    """What look-ahead asks of a policy (``PolicyRunner``)."""

    def distribution(
        self, observations: list[Observation], histories: list[list[str]], temperature: float = 1.0
    ) -> list: ...


class Predicting(Protocol):
    """What look-ahead asks of a world model (``WorldModelRunner``)."""

    def predict(self, obs_list: list[Observation], actions: list) -> list: ...


@dataclass
class Branch:
    """One simulated candidate: its first action, its policy log-prob and the page it is on."""

    action: Action
    logprob: float
    obs: Observation
    history: list[str]
    value: float = 0.0
    open: bool = True
    steps: int = 0


@dataclass
class LookaheadStats:
    decisions: int = 0
    changed: int = 0  # decisions where look-ahead took another action than greedy
    wm_calls: int = 0  # batched world-model predictions
    wm_rows: int = 0  # (page, action) pairs the world model predicted
    policy_calls: int = 0
    seconds: float = 0.0
    no_heads: int = 0  # decisions taken greedily: the world model's heads are not trained
    values: list[float] = field(default_factory=list)  # the chosen branch's value

    def summary(self) -> dict:
        d = max(1, self.decisions)
        return {
            "decisions": self.decisions,
            "changed_share": round(self.changed / d, 4),
            "wm_calls_per_decision": round(self.wm_calls / d, 3),
            "wm_rows_per_decision": round(self.wm_rows / d, 3),
            "policy_calls_per_decision": round(self.policy_calls / d, 3),
            "seconds_per_decision": round(self.seconds / d, 4),
            "greedy_for_lack_of_heads": self.no_heads,
            "mean_chosen_value": round(sum(self.values) / len(self.values), 4)
            if self.values
            else None,
        }


class LookaheadRunner:
    """Acting by ``k`` candidates simulated ``depth`` steps in the world model (module doc)."""

    def __init__(
        self, policy: Distribution, world_model: Predicting, k: int = 3, depth: int = 1
    ) -> None:
        if k < 1 or depth < 1:
            raise ValueError(f"look-ahead needs k >= 1 and depth >= 1, got k={k}, depth={depth}")
        self.policy, self.world_model, self.k, self.depth = policy, world_model, k, depth
        self.stats = LookaheadStats()

    @property
    def policy_version(self) -> int:
        return int(getattr(self.policy, "policy_version", 0))

    def act(
        self,
        observations: list[Observation],
        histories: list[list[str]],
        temperature: float = 1.0,
        greedy: bool = True,
    ) -> list[tuple[Action, float, int]]:
        return [x[:3] for x in self.act_info(observations, histories, temperature, greedy)]

    def act_info(
        self,
        observations: list[Observation],
        histories: list[list[str]],
        temperature: float = 1.0,
        greedy: bool = True,
    ) -> list[tuple[Action, float, int, dict]]:
        """One decision per observation (see the module doc); ``greedy`` and ``temperature`` only
        set the policy's distribution (look-ahead's choice is deterministic)."""
        out = []
        for obs, hist in zip(observations, histories, strict=True):
            t0 = time.perf_counter()
            action, lp, info = self._decide(obs, hist, temperature if temperature > 0 else 1.0)
            self.stats.seconds += time.perf_counter() - t0
            self.stats.decisions += 1
            out.append((action, lp, 0, info))  # no token count: look-ahead makes no group
        return out

    def _decide(self, obs: Observation, hist: list[str], t: float) -> tuple[Action, float, dict]:
        acts, logps = self.policy.distribution([obs], [hist], t)[0]
        self.stats.policy_calls += 1
        order = sorted(range(len(acts)), key=lambda i: -float(logps[i]))
        branches = [Branch(acts[i], float(logps[i]), obs, list(hist)) for i in order[: self.k]]
        heads = self._simulate(branches)
        if not heads:
            self.stats.no_heads += 1
        best = max(range(len(branches)), key=lambda j: (branches[j].value, -j))
        if best != 0:
            self.stats.changed += 1
        self.stats.values.append(branches[best].value)
        info = {
            "lookahead": [
                {"action": b.action.to_text(), "logprob": round(b.logprob, 4), "value": b.value}
                for b in branches
            ]
        }
        return branches[best].action, branches[best].logprob, info

    def _simulate(self, branches: list[Branch]) -> bool:
        """Every branch ``depth`` steps deep; False when the world model has no trained heads."""
        heads = True
        actions = [b.action for b in branches]
        for step in range(self.depth):
            live = [j for j, b in enumerate(branches) if b.open]
            if not live:
                break
            if step > 0:  # the policy continues each open branch greedily on its predicted page
                dists = self.policy.distribution(
                    [branches[j].obs for j in live], [branches[j].history for j in live]
                )
                self.stats.policy_calls += 1
                for j, (acts, logps) in zip(live, dists, strict=True):
                    actions[j] = acts[int(logps.argmax())]
            ask = []
            for j in live:
                b = branches[j]
                settled = dream_outcome(b.obs, actions[j])
                if settled is not None:  # stop, or refused before the page is touched: value 0
                    b.open, b.value = False, 0.0
                else:
                    ask.append(j)
            if not ask:
                continue
            preds = self.world_model.predict(
                [branches[j].obs for j in ask], [actions[j] for j in ask]
            )
            self.stats.wm_calls += 1
            self.stats.wm_rows += len(ask)
            for j, p in zip(ask, preds, strict=True):
                b = branches[j]
                if p.p_success is None or p.p_done is None:
                    heads = False
                    b.open, b.value = False, 0.0
                    continue
                b.value = float(p.p_done) * float(p.p_success)
                b.history = b.history + [actions[j].to_text()]
                b.obs, b.steps = p.next_obs, b.steps + 1
                b.open = float(p.p_done) <= 0.5
        return heads
