"""The world model's ensemble: K bootstrapped reward/done heads whose disagreement says where the
model does not know (``model.world_model_ensemble``; ``WorldModelSpec.ensemble``).

Each member is a linear classifier pair (task success vs not, done vs not) on the heads' input
(``WorldModel.head_input``), the input the single reward/done heads read, *detached*: the members
read the shared trunk's features and never shape them, so the trunk and the single heads train as
without an ensemble (a last-layer ensemble, as in neural-linear and bootstrapped DQN's heads with
the trunk's gradient cut).  Members start from their own seeded weights (their prior) and each is
trained on its own bootstrap of every batch: the double-or-nothing bootstrap (``bootstrap_weights``:
a transition weighs 2 or 0 for a member, by a hash of (its episode, its step, the member), so the
same transition is in or out of a member's bag in every batch it comes in: an online bootstrap).

What the dreams read (``models.world_model.runner.WorldModelRunner.predict``): per prediction the
members' mean and standard deviation of p(success) (``ensemble_stats``); the standard deviation is
the disagreement.  ``pessimistic_success`` is the dreamed reward's rule (MOPO-style: the lower
bound ``mean - lambda x std`` must clear 0.5 as well as the single head).
"""

from __future__ import annotations

import hashlib

import torch

OUTPUTS = 4  # per member: reward logits (2) and done logits (2)


class EnsembleHeads(torch.nn.Module):
    """K members, one (d -> K x 4) weight: ``forward`` (B, d) -> (reward, done) logits, each
    (K, B, 2)."""

    def __init__(self, dim: int, k: int, seed: int = 4400):
        super().__init__()
        g = torch.Generator().manual_seed(seed)  # never the global generator (other draws stay)
        self.k = int(k)
        # a prior scale larger than the single heads' 0.02: members disagree where no data
        # pulled them together
        self.weight = torch.nn.Parameter(torch.randn(self.k * OUTPUTS, dim, generator=g) * 0.05)
        self.bias = torch.nn.Parameter(torch.zeros(self.k * OUTPUTS))

    def forward(self, head_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = head_input.detach().to(self.weight.dtype)
        out = torch.nn.functional.linear(x, self.weight, self.bias)  # (B, K*4)
        out = out.view(x.shape[0], self.k, OUTPUTS).permute(1, 0, 2)  # (K, B, 4)
        return out[..., :2], out[..., 2:]


def bootstrap_weights(keys: list[str], k: int) -> torch.Tensor:
    """(K, B) double-or-nothing bootstrap weights: 2.0 or 0.0 per (member, row), from a hash of
    the row's ``key`` (its transition: episode and step) and the member, so a row keeps its
    member bags across batches; mean weight 1."""
    return torch.tensor([[2.0 * (_hash_byte(f"{key}|{m}") & 1) for key in keys] for m in range(k)])


def _hash_byte(text: str) -> int:
    # a cryptographic hash: CRC32's low bit is linear in the text and gave every member one bag
    return hashlib.blake2b(text.encode(), digest_size=1).digest()[0]


def ensemble_stats(p_members: torch.Tensor) -> tuple[list[float], list[float]]:
    """(mean, std) over the members (dim 0) of (K, B) probabilities, per row; std is the
    population standard deviation (0 for one member)."""
    p = p_members.float()
    return p.mean(0).tolist(), p.std(0, unbiased=False).tolist()


def pessimistic_success(p_single: float, mean: float, std: float, pessimism: float) -> bool:
    """A dreamed success: the single reward head says so (p > 0.5) and the ensemble's lower bound
    ``mean - pessimism x std`` is above 0.5 too (``dream.pessimism``; 0: the reward head alone, the
    members measured but not used)."""
    return p_single > 0.5 and (pessimism <= 0 or mean - pessimism * std > 0.5)


def transition_key(t: object) -> str:
    """The bootstrap key of a transition record (``streams.records.Transition``): its episode
    and step."""
    return f"{t.episode_id}:{t.step}"  # type: ignore[attr-defined]
