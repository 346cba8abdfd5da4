"""Acting: the policy (``models.policy.model.Policy``) with decoding constrained to valid actions.

The policy is a distribution over the page's valid actions ``C(s) =
policy_candidates(tokenizer, obs, prompt_ids, max_positions, max_candidates)``
(``models.policy.candidates``: what is enumerated, and why the same function serves acting and
learning):

    pi_T(a|s) = softmax_{c in C(s)}(score(c) / T)[a],

the score of a candidate being the summed token log-prob of its text + eos given the prompt plus,
for a policy with the element head, its term (``models.policy.log_pi``: the one definition, which
the learner computes in its batched mode).

Acting (``PolicyRunner.act_info``; ``act`` is the 3-tuple view): for every
observation every candidate's tokens are scored, one is drawn from ``pi_T`` (or
the argmax when ``greedy``), and the recorded behaviour log-probability is
``log pi_T(a|s)`` -- exactly the probability the action was sampled with, at
the temperature it was sampled with (``info["temperature"]``; a temperature <= 0
means argmax and records ``log pi_1``; greedy acting with T > 0 records
``log pi_T``).  Dropout is off (``model.eval()``), so the learner's recomputation
of ``log pi_T`` with the unchanged model gives the same number.
Scoring is ``LogPi.cached`` (shared prefixes in a KV cache, token tries).
"""

from __future__ import annotations

import torch

from core.config import ModelConfig
from core.spaces import Action, Observation
from models.lm.prompts import policy_prompt_ids
from models.lm.tokenizer import pad_id
from models.lm.types import Tokenizer
from models.policy.candidates import MAX_CANDIDATES, candidates_hash, policy_candidates
from models.policy.log_pi import LogPi, candidate_logprobs, record_temperature
from models.policy.model import Policy


def sampler_generator(run_id: str, producer_id: str, counter: int = 0) -> torch.Generator:
    """The random stream of one sampler (a dream generator, a live-policy collector): seeded from
    (run, producer, counter), so two samplers, or two incarnations of one, never replay the same
    draws; the sampler keeps it across hot reloads (a reload must not rewind it)."""
    import hashlib

    g = torch.Generator()
    g.manual_seed(
        int.from_bytes(
            hashlib.sha256(f"{run_id}|{producer_id}|{counter}".encode()).digest()[:8], "big"
        )
    )
    return g


class PolicyRunner:
    """Batched constrained acting.  ``policy_version`` is set by the checkpoint loader."""

    def __init__(
        self,
        model: Policy,
        tokenizer: Tokenizer,
        cfg: ModelConfig,
        max_candidates: int = MAX_CANDIDATES,
        policy_version: int = 0,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.max_positions = int(cfg.max_positions)
        self.max_candidates = max_candidates
        self.policy_version = policy_version
        self.stats: dict = {"tokens": 0}  # tokens run through the model (prompts + candidate tries)
        # a long-lived sampler passes its own stream (``sampler_generator``), kept across hot reloads
        if generator is None:
            generator = torch.Generator()
            generator.manual_seed(cfg.seed if seed is None else seed)
        self.generator = generator

    def act(
        self,
        observations: list[Observation],
        histories: list[list[str]],
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> list[tuple[Action, float, int]]:
        """One action per observation: (Action, behaviour logprob ``log pi_T(a|s)``, action token count).

        The 3-tuple view of ``act_info`` (without the per-decision extras).
        """
        return [x[:3] for x in self.act_info(observations, histories, temperature, greedy)]

    def act_info(
        self,
        observations: list[Observation],
        histories: list[list[str]],
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> list[tuple[Action, float, int, dict]]:
        """One decision per observation: (Action, ``log pi_T(a|s)``, action token count, info).

        ``info``: ``candidates_hash`` (of C(s)), ``temperature`` (the T of the
        recorded log-prob, see ``record_temperature``), ``n_candidates``.
        """
        assert len(observations) == len(histories), (len(observations), len(histories))
        if not observations:
            return []
        t_rec = record_temperature(temperature)
        which, cands, cand_ids, logps = self._distributions(observations, histories, t_rec)
        hashes = [candidates_hash([a.to_text() for a in acts]) for acts in cands]
        out = []
        for u in which:
            acts, ids, lp = cands[u], cand_ids[u], logps[u]
            if greedy or temperature <= 0:
                k = int(torch.argmax(lp))
            else:
                k = int(torch.multinomial(lp.exp(), 1, generator=self.generator))
            info = {"candidates_hash": hashes[u], "temperature": t_rec, "n_candidates": len(acts)}
            out.append((acts[k], float(lp[k]), len(ids[k]), info))
        return out

    def distribution(
        self, observations: list[Observation], histories: list[list[str]], temperature: float = 1.0
    ) -> list[tuple[list[Action], torch.Tensor]]:
        """Per observation: its candidate actions C(s) and ``log pi_T`` over them (the
        distribution ``act_info`` draws from; nothing is drawn)."""
        if not observations:
            return []
        which, cands, _, logps = self._distributions(
            observations, histories, record_temperature(temperature)
        )
        return [(cands[u], logps[u]) for u in which]

    def _distributions(
        self, observations: list[Observation], histories: list[list[str]], t_rec: float
    ) -> tuple[list[int], list[list[Action]], list[list[list[int]]], list[torch.Tensor]]:
        """(for each input its distinct page's index, and per distinct (page, history): the
        candidates, their token ids and ``log pi_T``).  Identical (observation, history) inputs --
        e.g. the G rollouts of a group at their first step -- are scored once."""
        keys: dict[tuple, int] = {}
        which, prompts, cands, cand_ids = [], [], [], []
        for obs, hist in zip(observations, histories, strict=True):
            p = policy_prompt_ids(self.tokenizer, obs, hist, self.max_positions)
            key = (tuple(p), obs.tree, obs.instruction)
            if key not in keys:
                keys[key] = len(prompts)
                acts, ids = policy_candidates(
                    self.tokenizer, obs, p, self.max_positions, self.max_candidates
                )
                prompts.append(p)
                cands.append(acts)
                cand_ids.append(ids)
            which.append(keys[key])
        log_pi = LogPi(self.model, pad_id(self.tokenizer), self.max_positions)
        scores = log_pi.cached(prompts, cand_ids, stats=self.stats)
        return which, cands, cand_ids, [candidate_logprobs(s, t_rec) for s in scores]
