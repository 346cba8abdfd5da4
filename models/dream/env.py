"""Dreams: the world model as an environment, and batched dream rollouts.

``DreamEnv`` has the live environment's API shape (gymnasium style)::

    obs, info = env.reset(start_obs, task, seed)
    obs, reward, terminated, truncated, info = env.step(action)

``step`` asks the world model for the change, applies it, and returns the
predicted page; ``info`` carries ``ok``/``reason``/``text`` of the prediction.

Reward in dreams: no real page can say whether the task succeeded, so the
reward of a dream rollout is the *world model's predicted reward at the end of
the rollout* (of the last step, where the world model also predicted ``done`` or
the horizon was reached): its ``reward_head`` (1.0 if p(success) > 0.5, else 0.0; with a
trained ensemble only when the members' pessimistic bound agrees, ``models.world_model.ensemble``)
and ``done_head`` once trained, else the text's ``reward``/``done`` lines
(``models.world_model.runner``).  Intermediate steps carry the world model's per-step
prediction for inspection; consumers use the last step (``Trajectory.reward`` =
last transition's reward).  A rejected world-model output (``ok`` False) leaves
the page unchanged (reward and done still from the heads; without trained heads
reward 0, not done).

``dream_rollouts`` advances all G x S rollouts one step together: one batched
``PolicyRunner.act`` and one batched ``WorldModelRunner.predict`` per step
(finished rollouts drop out of the batch).

Dreamed and live episodes end by the same rules and render the same fields
(``dream_outcome``): ``stop`` ends the episode (reward 0, page unchanged, no
world-model call), as in ``collectors.env.WebEnv``; an action the live page
would refuse before touching it (an element id not on the page, an unknown key:
``core.spaces.precheck_error``) leaves the page unchanged with the same
``Error:`` line; otherwise the world model predicts the change, reward and
done; the step limit (the horizon) truncates.

Disagreement (``dream.max_disagreement``, the world model's ensemble,
``models.world_model.ensemble``): a predicted step on which the members' p(success) spreads more
than the bound ends the dream there: done, reward 0, reason ``disagreement``
(``end_on_disagreement``).  The dream is kept, not discarded: it stays in its GSPO group as a
failure, so its actions get the advantage of a failure against the group's confident successes
(pessimism where the model does not know, after MOPO), the group keeps its size (a discarded
rollout would leave the group to its confident members, and the policy would learn only where
the model is sure), and the reward is never judged on a page the model cannot judge.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from core.spaces import Action, Observation, parse_action, precheck_error
from core.waiting import Aborted


class Acting(Protocol):
    """What dreams ask of a policy (``models.policy.runner.PolicyRunner``)."""

    def act_info(
        self,
        observations: list[Observation],
        histories: list[list[str]],
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> list[tuple[Action, float, int, dict]]: ...


class Predicting(Protocol):
    """What dreams ask of a world model (``models.world_model.runner.WorldModelRunner``)."""

    def predict(
        self,
        obs_list: list[Observation],
        actions: list,
        sample: bool = False,
        temperature: float = 1.0,
        abort: Callable[[], bool] | None = None,
    ) -> list[Any]: ...


def dream_outcome(obs: Observation, action: Action) -> tuple[Observation, bool, str] | None:
    """The outcome of ``action`` that needs no world model, as the live environment gives it:
    ``(next page, done, reason)`` for ``stop`` and for an action refused before it touches the page;
    None when the world model must predict."""
    if action.kind == "stop":
        return replace(obs, last_action_error=""), True, "stop"
    err = precheck_error(action, set(obs.element_ids))
    if err:
        return replace(obs, last_action_error=err), False, "refused"
    return None


class DreamEnv:
    def __init__(self, world_model_runner: Predicting, max_steps: int = 5, sample: bool = False):
        self.wm = world_model_runner
        self.max_steps = max_steps
        self.sample = sample
        self.obs: Observation | None = None
        self.task = ""
        self.seed = 0
        self.t = 0
        self.history: list[str] = []

    def reset(
        self, start_obs: Observation, task: str = "", seed: int = 0
    ) -> tuple[Observation, dict]:
        self.obs, self.task, self.seed, self.t, self.history = start_obs, task, seed, 0, []
        return start_obs, {"task": task, "seed": seed, "dream": True}

    def step(self, action: Action | str) -> tuple[Observation, float, bool, bool, dict]:
        if self.obs is None:
            raise RuntimeError("call reset() before step()")
        act = action if isinstance(action, Action) else parse_action(action)
        self.t += 1
        self.history.append(act.to_text())
        fixed = dream_outcome(self.obs, act)
        if fixed is not None:
            nxt, terminated, reason = fixed
            reward, info = 0.0, {"ok": True, "reason": reason, "text": "", "step": self.t}
        else:
            pred = self.wm.predict([self.obs], [act], sample=self.sample)[0]
            nxt, terminated, reward = pred.next_obs, bool(pred.done), float(pred.reward)
            info = {"ok": pred.ok, "reason": pred.reason, "text": pred.text, "step": self.t}
        self.obs = nxt
        truncated = not terminated and self.t >= self.max_steps
        return nxt, reward, terminated, truncated, info


class Rollout(list):
    """A list of step dicts with ``group_id``, ``start_index`` and ``steps`` (itself)."""

    def __init__(self, group_id: str, start_index: int):
        super().__init__()
        self.group_id = group_id
        self.start_index = start_index

    @property
    def steps(self) -> list[dict]:
        return self

    @property
    def reward(self) -> float:
        return float(self[-1]["reward"]) if self else 0.0


def _predict(
    wm_runner: Predicting, obs_b: list, acts: list, ask: list[int], sample: bool, abort
) -> dict:
    """The world model's predictions for rows ``ask``, by row (``abort`` handed to it when given: it may
    raise ``core.waiting.Aborted`` mid-call)."""
    if not ask:
        return {}
    kw = {"abort": abort} if abort is not None else {}
    out = wm_runner.predict([obs_b[j] for j in ask], [acts[j][0] for j in ask], sample=sample, **kw)
    return dict(zip(ask, out, strict=True))


def end_on_disagreement(step: dict, bound: float) -> dict:
    """``step`` (a predicted step's dict, with ``disagreement``) ended when its disagreement is
    above ``bound`` (0: never): done, reward 0, reason ``disagreement``."""
    d = step.get("disagreement")
    if bound <= 0 or d is None or d <= bound:
        return step
    return {**step, "done": True, "reward": 0.0, "reason": "disagreement"}


def dream_rollouts(
    policy_runner: Acting,
    wm_runner: Predicting,
    start_states: list,
    group_size: int,
    horizon: int,
    temperature: float = 1.0,
    greedy: bool = False,
    sample_world: bool = False,
    batch: int | None = None,
    abort: Callable[[], bool] | None = None,
    max_disagreement: float = 0.0,
) -> list[Rollout]:
    """G rollouts per start state (sharing a fresh group id), at most ``horizon`` steps.
    ``abort``: asked before each step after the first, and by the world model every few tokens
    of its call; when it says so the round is given up and nothing is returned (the dream
    generator: a new checkpoint was announced).

    ``start_states``: Observations (or objects with ``.obs``).  Step dict keys:
    obs, action (text), next_obs, reward, done, behaviour_logprob (= logprob =
    log pi_T of the candidate set), ntokens, candidates_hash, temperature (the T of
    the logprob), at (when the step's next page was there: ``time.time()``), ok, reason, p_success (the reward head's probability; None when the
    world model was not asked or its heads are untrained), disagreement (the ensemble's std of
    p(success), None likewise).  ``batch`` caps how many rollouts advance together;
    ``max_disagreement``: ``end_on_disagreement``'s bound (0: off).
    """
    starts = [s if isinstance(s, Observation) else s.obs for s in start_states]
    rollouts: list[Rollout] = []
    state: list[tuple[Rollout, Observation, list[str]]] = []
    for i, obs in enumerate(starts):
        gid = uuid.uuid4().hex
        for _ in range(group_size):
            ro = Rollout(gid, i)
            rollouts.append(ro)
            state.append((ro, obs, []))
    cap = batch or len(state) or 1
    for h in range(horizon):
        if h and abort is not None and abort():
            return []
        active = [k for k, (ro, _, _) in enumerate(state) if not (ro and ro[-1]["done"])]
        if not active:
            break
        for c in range(0, len(active), cap):
            idx = active[c : c + cap]
            obs_b = [state[k][1] for k in idx]
            decided = policy_runner.act_info(
                obs_b, [state[k][2] for k in idx], temperature=temperature, greedy=greedy
            )
            acts = [d[:3] for d in decided]
            infos = [d[3] for d in decided]  # candidates_hash, temperature per decision
            fixed = [dream_outcome(o, a) for o, (a, _, _) in zip(obs_b, acts, strict=True)]
            ask = [j for j, f in enumerate(fixed) if f is None]  # only these need the world model
            try:
                preds = _predict(wm_runner, obs_b, acts, ask, sample_world, abort)
            except Aborted:
                return []
            at = time.time()  # when these steps happened (their transitions' ``created_at``)
            for j, (k, (act, lp, nt)) in enumerate(zip(idx, acts, strict=True)):
                ro, obs, hist = state[k]
                text = act.to_text()
                if fixed[j] is not None:
                    nxt, done, reason = fixed[j]
                    step = {
                        "next_obs": nxt,
                        "reward": 0.0,
                        "done": done,
                        "ok": True,
                        "reason": reason,
                        "p_success": None,
                        "disagreement": None,
                    }
                else:
                    p = preds[j]
                    step = {
                        "next_obs": p.next_obs,
                        "reward": float(p.reward),
                        "done": bool(p.done),
                        "ok": p.ok,
                        "reason": p.reason,
                        "p_success": p.p_success,
                        "disagreement": p.disagreement,
                    }
                    step = end_on_disagreement(step, max_disagreement)
                ro.append(
                    {
                        "obs": obs,
                        "action": text,
                        **step,
                        "behaviour_logprob": float(lp),
                        "logprob": float(lp),
                        "ntokens": int(nt),
                        "at": at,
                        "candidates_hash": str(infos[j].get("candidates_hash") or ""),
                        "temperature": float(
                            infos[j].get("temperature") or (temperature if temperature > 0 else 1.0)
                        ),
                    }
                )
                state[k] = (ro, step["next_obs"], hist + [text])
    return rollouts
