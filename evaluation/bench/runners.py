"""The benchmarks' variants of the production runners (what they measure against, kept out of
``models``): a world model that always writes its whole budget, and ``decode="head"`` done the
other way round (every row's text first, the change head's pick after)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from models.world_model.runner import WorldModelRunner


class FixedLengthRunner(WorldModelRunner):
    """Every row generates ``max_change_tokens`` tokens, eos ignored (a fresh or a trained world
    model then costs the same per step: ``dynaweb bench dream``)."""

    def _tokens(self, *args: Any, **kwargs: Any) -> tuple[list[list[int]], torch.Tensor | None]:
        return super()._tokens(*args, **{**kwargs, "ignore_eos": True})

    @staticmethod
    def _until_eos(row: list[int], eos: int) -> list[int]:
        return row


class TextThenHeadRunner(WorldModelRunner):
    """``decode="head"`` with every row's text generated first and the change head's pick after
    (what dreams did before the head picked first: ``dynaweb bench wm-decode``'s
    ``text_then_head``)."""

    def _head_outputs(
        self,
        obs_list: list,
        acts: list,
        prompts: list,
        sample: bool,
        temperature: float,
        abort: Callable[[], bool] | None,
    ) -> tuple[list[str], torch.Tensor]:
        outs, hidden = self._generate(prompts, sample, temperature, True, abort)
        assert hidden is not None
        return self._picked(obs_list, acts, hidden, outs), hidden
