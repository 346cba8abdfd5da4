"""Where the world model's heads read a prompt.

The reward, done and change heads (``models.world_model.model.WorldModel``) read one vector per
row, the heads' input: the mean of the last layer's hidden states over ``head_positions`` of the
row's prompt (the line of the element the action names and the prompt's ``Action: ...`` tail),
plus, with the named lines' layer (``models.world_model.lines``), that layer on the row's
``RowLines``.  ``HeadPlaces`` holds both for a batch; ``WorldModel.head_places`` makes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.spaces import Action, parse_action
from models.lm.tokenizer import decode, encode
from models.lm.types import Tokenizer
from models.world_model.lines import RowLines


@dataclass(frozen=True)
class HeadPlaces:
    """Per row of a batch, the prompt positions the heads' input averages (``head_positions``)
    and the named lines' layer's ``RowLines`` (None: the plain mean, as for a model without the
    layer)."""

    positions: list[list[int]]
    lines: list[RowLines] | None = None


def try_parse_action(text: str) -> Action | None:
    """The action ``text`` names, or None when it names none."""
    try:
        return parse_action(text)
    except ValueError:
        return None


def head_positions(tokenizer: Tokenizer, prompt: list[int]) -> list[int]:
    """Positions of ``prompt`` (world-model prompt ids) whose last-layer hidden states the reward/done
    heads average: the line of the element the action names (``[k] ...`` up to its newline, its first
    occurrence at a line start, when the page shows it) and the action tail (``Action: ...`` up to the
    last prompt token).  Only the last prompt token when there is no ``Action:`` marker.

    Why not the last prompt token alone: its hidden state has to gather the action from a few tokens
    among the whole page by attention, which a fresh model had not learned after 60 steps (p(success)
    within 0.01 across every action of a page), while the action's own tokens and the acted element's
    line (its role, its label, the instruction it can attend to) carry it from the first step."""
    n = len(prompt)
    mark = encode(tokenizer, "Action:")
    m = len(mark)
    start = next((i for i in range(n - m, -1, -1) if prompt[i : i + m] == mark), None)
    if start is None or not m:
        return [n - 1]
    tail = list(range(start, n))
    act = try_parse_action(decode(tokenizer, prompt[start + m :]).split("\n", 1)[0].strip())
    if act is None or act.element is None:
        return tail
    digits = encode(tokenizer, f"{act.element}]")
    k = len(digits)
    for j in range(start - k):
        if (
            prompt[j + 1 : j + 1 + k] == digits
            and decode(tokenizer, [prompt[j]]).strip() == "["
            and (j == 0 or not decode(tokenizer, [prompt[j - 1]]).strip())
        ):
            end = j + 1 + k
            while end < start and "\n" not in decode(tokenizer, [prompt[end]]):
                end += 1
            return list(range(j, end)) + tail
    return tail
