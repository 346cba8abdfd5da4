"""The instruction-match input feature of the world model (``WorldModelSpec.match_feature``) and
the policy (``PolicySpec.match_feature``).

What it is: one learned vector (``model.match.weight``, d_model, zero at init) added to the
input embedding of every prompt token that belongs to a word of the page (or the action) that
also appears, as a whole word, in the task instruction (the prompt's first line).  Words are
runs of letters, digits and ``_`` (``\\w+``), compared case-sensitively; a token is flagged when
its characters overlap a flagged word.  Only the span from the end of the instruction line to the
``Change:`` marker is flagged: the instruction itself, and every token the model writes (the
change text, in training and when generating), never are, so training and decoding see the same
inputs.

Why: the reward of a task's last step is mostly "does the page now hold what the instruction
asked for" (the typed text, the selected option, the checked boxes, the link clicked).  Telling
that from the tokens alone means matching strings across the prompt by attention, which a small
model trained on a few hundred terminal steps did not learn (terminal reward balanced accuracy
0.60-0.71 on click-checkboxes, enter-text and choose-list).  The flag hands it the match, as the
exact-match feature of reading-comprehension models (DrQA's "exact match" token feature) does.

How: the model's forward adds it (``models.lm.base.LanguageModel.forward``, the flags an
argument), so every path (training loss, prefill, cached decoding, the heads' forward) gets it.
A row is flagged only when it starts (after padding) with ``Task: ``; the cached decoding steps
feed new tokens only, which never are.  Callers that feed a prompt in pieces (a shared prefix,
then each row's tail) pass each piece's flags, cut from the whole prompt's (``match_flags``).

The policy's span ends before the prompt's ``Action:`` line (``POLICY_END``), so the action text
the policy scores is never flagged.
"""

from __future__ import annotations

import re

import torch

from models.lm.tokenizer import decode
from models.lm.types import Tokenizer

_WORD = re.compile(r"\w+")
TASK = "Task: "
END = "\nChange:\n"
ACTION = "\nAction: "  # the prompts' action line (models.lm.prompts)
POLICY_END = ACTION  # the policy's flagged span ends before its action line


def token_pieces(tokenizer: Tokenizer) -> list[str]:
    """Each id's own text (special ids: empty).  Byte-level pieces of a multi-byte character
    decode to replacement characters; they are never part of an ASCII word match anyway."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    return ["" if i in special else decode(tokenizer, [i]) for i in range(len(tokenizer))]


def _scan(
    ids: list[int], pieces: list[str], end_mark: str = END
) -> tuple[list[str], list[int], str, bytearray, int]:
    """(token texts, their start offsets, the row's text, per character: part of a flagged word,
    the end of the instruction line (-1: not a prompt row))."""
    texts = [pieces[i] if 0 <= i < len(pieces) else "" for i in ids]
    starts, pos = [], 0
    for t in texts:
        starts.append(pos)
        pos += len(t)
    text = "".join(texts)
    hit = bytearray(len(text))
    nl = text.find("\n") if text.startswith(TASK) else -1
    if nl < 0:
        return texts, starts, text, hit, -1
    words = set(_WORD.findall(text[len(TASK) : nl]))
    end = text.find(end_mark, nl)
    end = len(text) if end < 0 else end + 1  # the newline before "Change:" stays in the span
    for m in _WORD.finditer(text, nl + 1, end):
        if m.group(0) in words:
            hit[m.start() : m.end()] = b"\x01" * (m.end() - m.start())
    return texts, starts, text, hit, nl


def match_flags(ids: list[int], pieces: list[str], end_mark: str = END) -> list[bool]:
    """Per token of one row: does it overlap a word of the flagged span that is also a word of
    the instruction (the module docstring's rule)?  All False for a row not starting with
    ``Task: `` (after empty pieces, i.e. padding)."""
    texts, starts, _, hit, _ = _scan(ids, pieces, end_mark)
    return [any(hit[s : s + len(t)]) for s, t in zip(starts, texts, strict=True)]


def match_line_positions(ids: list[int], pieces: list[str]) -> list[int]:
    """Positions of the tokens of every page line (after the instruction line, before the
    ``Action:`` line) that holds a flagged word: the whole line, its state words (``checked``,
    ``selected``, a ``value``) included.  Empty for a row that is not a prompt."""
    return named_positions(page_line_positions(ids, pieces))


def named_positions(page: list[tuple[bool, list[int]]]) -> list[int]:
    """The positions of ``page_line_positions``' named lines, in order, each once."""
    return sorted({q for named, qs in page if named for q in qs})


def page_line_positions(ids: list[int], pieces: list[str]) -> list[tuple[bool, list[int]]]:
    """Per page line (after the instruction line, before the ``Action:`` line), in order: (does it
    hold a flagged word, the positions of the tokens that overlap it).  Empty for a row that is not
    a prompt.  A token across a line break counts in both lines."""
    return page_lines(ids, pieces)[0]


_ELEMENT = re.compile(r"\s*\w+\((\d+)")  # the element an action names
_LINE = re.compile(r"\s*\[(\d+)\]")  # a page line of element k starts (after blanks) with [k]


def acted_element(action: str, pos: int = 0) -> str | None:
    """The element id the action text at ``pos`` names (``click(4)``, ``type(3, "x")``: "4", "3"),
    None when it names none (``stop``, ``press(Enter)``)."""
    m = _ELEMENT.match(action, pos)
    return m.group(1) if m else None


def element_line_index(text: str, spans: list[tuple[int, int, bool, list[int]]]) -> dict[str, int]:
    """Element id -> the index in ``spans`` (``line_spans``) of that element's page line: the first
    whose text starts, after blanks, with ``[k]``."""
    out: dict[str, int] = {}
    for n, (a, b, _, _) in enumerate(spans):
        m = _LINE.match(text, a, b)
        if m and m.group(1) not in out:
            out[m.group(1)] = n
    return out


def line_spans(
    ids: list[int], pieces: list[str], end_mark: str = END
) -> tuple[str, list[tuple[int, int, bool, list[int]]]]:
    """The row's text and, per non-empty page line (after the instruction line, before the
    ``Action:`` line), in order: (its start and end in the text, does it hold a flagged word of
    ``end_mark``'s span, the positions of the tokens that overlap it).  A token across a line break
    counts in both lines.  No lines for a row that is not a prompt."""
    texts, starts, text, hit, nl = _scan(ids, pieces, end_mark)
    out: list[tuple[int, int, bool, list[int]]] = []
    if nl < 0:
        return text, out
    stop = text.find(ACTION, nl)
    stop = len(text) if stop < 0 else stop
    k, a = 0, nl + 1
    while a < stop:
        b = text.find("\n", a, stop)
        b = stop if b < 0 else b
        while k < len(texts) and starts[k] + len(texts[k]) <= a:
            k += 1
        j, pos = k, []
        while j < len(texts) and starts[j] < b:
            if texts[j]:
                pos.append(j)
            j += 1
        if b > a:
            out.append((a, b, any(hit[a:b]), pos))
        a = b + 1
    return text, out


def page_lines(ids: list[int], pieces: list[str]) -> tuple[list[tuple[bool, list[int]]], int]:
    """(``page_line_positions``, the index among them of the acted element's line: the first
    whose text starts, after blanks, with ``[k]``, k the element the ``Action:`` line names; -1
    when it names none or the page does not show it)."""
    text, spans = line_spans(ids, pieces)
    stop = text.find(ACTION)  # the instruction line holds no newline: the same as after it
    k = acted_element(text, stop + len(ACTION)) if spans and stop >= 0 else None
    acted = element_line_index(text, spans).get(k, -1) if k else -1
    return [(named, pos) for _, _, named, pos in spans], acted


class MatchFeature(torch.nn.Module):
    """``weight`` (d,) added to the input embeddings of flagged tokens by the model's forward
    (``models.lm.base.LanguageModel``); ``pieces``: each token id's text; ``end_mark``: where
    the flagged span ends (``END`` for the world model, ``POLICY_END`` for a policy)."""

    def __init__(self, dim: int, pieces: list[str], end_mark: str = END) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(dim))
        self.pieces = pieces
        self.end_mark = end_mark

    def flags(self, input_ids: torch.Tensor) -> torch.Tensor:
        rows = [match_flags(r, self.pieces, self.end_mark) for r in input_ids.tolist()]
        return torch.tensor(rows, dtype=torch.bool, device=input_ids.device)


def left_padded(rows: list[list[bool]], width: int) -> torch.Tensor:
    """(len(rows), width) bool: each row right-aligned (the callers' left padding), rest False."""
    out = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, r in enumerate(rows):
        if r:
            out[b, width - len(r) :] = torch.tensor(r, dtype=torch.bool)
    return out
