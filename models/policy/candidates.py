"""The policy's action set: C(s), the valid actions of a page.

``candidate_actions(obs)`` enumerates the valid actions of an observation (deterministic
order, de-duplicated, capped at ``max_candidates``): every typeable element x the texts the
task may want typed (``instruction_texts`` from the instruction, ``page_texts`` from the page),
every option of a select, Enter (and Tab where something is typeable), ``stop("")``, a click per
element, scroll down/up, then the pointer/selection actions where the page and the instruction
call for them (``models.policy.mouse_candidates``: drags, click_at, hover, select_text, key chords).
The page is read with ``core.pagetree.parse_tree``: elements and
options with its ``loose`` reading (any line of any page, dreamed ones included), the page's
texts with the rendered-form reading.

``policy_candidates(tokenizer, obs, prompt_ids, max_positions, max_candidates)`` keeps those
whose tokens fit after the prompt (``stop("")`` if none does): that is C(s), built by the same
function when acting (``models.policy.runner.PolicyRunner``) and when learning (``models.policy.loss``);
``candidates_hash`` (sha1 of the candidate texts joined by newlines, 16 hex chars) is recorded
on every transition, so the learner can tell when its rebuilt set differs from the one acted on.

Over C(s) the policy is ``pi_T(a|s) = softmax(score / T)[a]``: ``models.policy.log_pi``.
"""

from __future__ import annotations

import hashlib
import re

from core.pagetree import Node, parse_tree
from core.spaces import Action, Observation
from models.lm.prompts import action_ids
from models.lm.types import Tokenizer
from models.policy.mouse_candidates import pointer_candidates

TYPEABLE = ("textbox", "searchbox", "textarea", "input", "combobox", "spinbutton", "searchfield")
SELECTABLE = ("combobox", "listbox", "select", "menulist")
MAX_CANDIDATES = 128
MAX_TEXTS = 12
MAX_PAGE_TEXTS = 6
_FIELDS = re.compile(r"'(\w+)':\s*'((?:[^'\\]|\\.)*)'")
_NAME_AFTER = re.compile(r"\b(?:to|by|from)\s+([A-Z][\w'-]*\w)")
_TIME = re.compile(r"\b(\d{1,2}):(\d{2})\s*([AaPp])\.?[Mm]\b")
_RANGE = re.compile(r"\bbetween\s+(-?\d+)\s*(?:-|and|to)\s*(-?\d+)")
_NUMBER = re.compile(r"(?<![\w/.:-])-?\d+(?:\.\d+)?(?![\w/:]|\.\d)")


def instruction_texts(instruction: str, limit: int = MAX_TEXTS) -> list[str]:
    """Texts the task may want typed, from the instruction (deterministic order, at most ``limit``).

    Field values of a structured instruction (``{'utterance': ..., 'fields': {'to': 'Ann'}}``),
    quoted spans (with a lower/upper-case copy when the instruction asks for that case), words
    after enter/type/..., capitalised names after to/by/from, ``key: value`` spans, dates (and
    their ISO form, what a date input takes), 12-hour times as 24-hour ``HH:MM``, small ranges
    (``between 0-9``: every number) and plain numbers.
    """
    found, instruction = _field_values(instruction)
    found += _quoted_spans(instruction)
    found += _typed_words(instruction)
    found += _NAME_AFTER.findall(instruction)  # "forward that email to Jillian", "directed by Holt"
    found += _dates_times_numbers(instruction)
    out: list[str] = []
    for t in found:
        t = t.strip()
        if t and t not in out and len(t) <= 120:
            out.append(t)
    return out[:limit]


def _field_values(instruction: str) -> tuple[list[str], str]:
    """A structured instruction's field values (not ``task``/``utterance``), and the text to read
    on: its utterance ("" if it has none); a plain instruction: ``([], instruction)``."""
    fields = [(k, v) for k, v in _FIELDS.findall(instruction) if k not in ("task", "utterance")]
    if not fields:
        return [], instruction
    m = re.search(r"""'utterance':\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""", instruction)
    return [v for _, v in fields], m.group(1)[1:-1] if m else ""


def _quoted_spans(instruction: str) -> list[str]:
    """Quoted spans, each followed by its lower/upper-case copy when the instruction asks for that."""
    quoted: list[str] = []
    for pat in (r'"([^"]+)"', r"“([^”]+)”", r"(?<![A-Za-z])'([^']+)'(?![A-Za-z])"):
        quoted += re.findall(pat, instruction)
    low = instruction.lower()
    found: list[str] = []
    for q in quoted:
        found.append(q)
        if "lower case" in low or "lowercase" in low:
            found.append(q.lower())
        if "upper case" in low or "uppercase" in low:
            found.append(q.upper())
    return found


def _typed_words(instruction: str) -> list[str]:
    """The word after enter/type/write/... (and the words up to in/into/on/..., when 2-4)."""
    found: list[str] = []
    kw = r"\b(?:enter|type|write|input|search for|fill in|fill)\s+(?:the\s+(?:text|word|value)\s+)?"
    for m in re.finditer(kw + r"([^\s\"'“”.,;:!?]+(?:\s+[^\s\"'“”.,;:!?]+)*)", instruction, re.I):
        words = m.group(1).split()
        stop = next(
            (
                i
                for i, w in enumerate(words)
                if w.lower() in ("in", "into", "on", "to", "and", "then", "as")
            ),
            len(words),
        )
        if not words or words[0].lower() in ("the", "a", "an", "your", "it", "this"):
            continue
        found.append(words[0])
        if 1 < stop <= 4:
            found.append(" ".join(words[:stop]))
    return found


def _dates_times_numbers(instruction: str) -> list[str]:
    """``key: value`` spans, dates (and the ISO form), 12-hour times as ``HH:MM``, the numbers of
    a small range (``between 0-9``), then plain numbers."""
    found: list[str] = []
    # "from: Cincinnati, OH to: LEX on 10/16/2016." -> "Cincinnati, OH", "LEX"; dates/numbers
    for m in re.finditer(r"\b\w+:\s*([^:\"]+?)(?=\s+\w+:|\s+on\s|[.;!?]\s*$|$)", instruction):
        found.append(m.group(1).strip().rstrip(".,"))
    for d in re.findall(r"\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b", instruction):
        found.append(d)
        m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", d)
        if m:
            found.append(f"{m.group(3)}-{int(m.group(1)):02d}-{int(m.group(2)):02d}")
    for h, mi, ap in _TIME.findall(instruction):
        found.append(f"{int(h) % 12 + (12 if ap.lower() == 'p' else 0):02d}:{mi}")
    for a, b in _RANGE.findall(instruction):
        if 0 < int(b) - int(a) <= 10:
            found += [str(x) for x in range(int(a), int(b) + 1)]
    found += _NUMBER.findall(instruction)
    return found


def _arith(a: int, op: str, b: int) -> int | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op in ("*", "x", "×"):
        return a * b
    return a // b if op == "/" and b and a % b == 0 else None


def _solve(text: str) -> int | None:
    """``a op b =`` -> its value; ``x op a = b`` / ``a op x = b`` -> x (integers only)."""
    m = re.fullmatch(r"\s*(-?\d+)\s*([-+*x×/])\s*(-?\d+)\s*=\s*", text)
    if m:
        return _arith(int(m.group(1)), m.group(2), int(m.group(3)))
    m = re.fullmatch(r"\s*(x|-?\d+)\s*([-+*×/])\s*(x|-?\d+)\s*=\s*(-?\d+)\s*", text)
    if not m or (m.group(1) == "x") == (m.group(3) == "x"):
        return None
    op, c = m.group(2), int(m.group(4))
    if m.group(1) == "x":  # x op a = c
        a = int(m.group(3))
        inv = {
            "+": ("-", c, a),
            "-": ("+", c, a),
            "*": ("/", c, a),
            "×": ("/", c, a),
            "/": ("*", c, a),
        }[op]
    else:  # a op x = c
        a = int(m.group(1))
        inv = {
            "+": ("-", c, a),
            "-": ("-", a, c),
            "*": ("/", c, a),
            "×": ("/", c, a),
            "/": ("/", a, c),
        }[op]
    return _arith(inv[1], inv[0], inv[2])


def page_texts(obs: Observation, limit: int = MAX_PAGE_TEXTS) -> list[str]:
    """Texts the task may want typed, from the page (at most ``limit``).

    The value of a multi-line text field (a text to copy); list items that complete the value
    of a text field (autocomplete); a table's value cell whose label cell is named in the
    instruction or by a ``Label:`` on the page; the n-th word of a text when the instruction
    asks for "the n-th word"; a text spelled out in single spaced letters/digits, joined; the value
    of an arithmetic expression or the x of a one-step equation shown as text.
    """
    nodes = parse_tree(obs.tree)
    low = obs.instruction.lower()
    labels = {
        n.name.strip().rstrip(":").lower()
        for n in nodes
        if n.role in ("label", "text") and n.name.endswith(":")
    }
    typed = [n.value for n in nodes if n.role in TYPEABLE and n.value]
    nth = re.search(r"\b(\d+)(?:st|nd|rd|th) word\b", low)
    found: list[str] = []
    for n in nodes:
        if n.role in TYPEABLE and n.has("multiline") and n.value:
            found.append(n.value)
        elif (
            n.role in ("listitem", "option", "menuitem")
            and n.name
            and any(n.name.lower().startswith(v.lower()) and n.name != v for v in typed)
        ):
            found.append(n.name)
        elif n.role == "row" and len(n.children) == 2:
            k, v = (nodes[c] for c in n.children)
            if (
                k.role == v.role == "cell"
                and k.name
                and v.name
                and (k.name.lower() in low or k.name.lower() in labels)
            ):
                found.append(v.name)
        elif n.role == "text" and n.name:
            words = [w.strip(".,;:!?\"'()") for w in n.name.split()]
            if nth and 0 < int(nth.group(1)) <= len(words):
                found.append(words[int(nth.group(1)) - 1])
            if re.fullmatch(r"(?:\w ){1,15}\w", n.name):
                found.append(n.name.replace(" ", ""))
            x = _solve(n.name)
            if x is not None:
                found.append(str(x))
    out: list[str] = []
    for t in found:  # as on the page (a text to copy keeps its spaces)
        if t.strip() and t not in out and len(t) <= 120:
            out.append(t)
    return out[:limit]


def candidate_actions(obs: Observation, max_candidates: int = MAX_CANDIDATES) -> list[Action]:
    """Valid actions for ``obs`` (deterministic order, de-duplicated, capped).

    Every typeable element x (``instruction_texts`` + ``page_texts``), every option of a
    select (options without an id too), Enter (and Tab where something is typeable), stop, a
    click per element, scroll down/up.
    """
    nodes = parse_tree(obs.tree, loose=True)
    texts = instruction_texts(obs.instruction)
    texts += [t for t in page_texts(obs) if t not in texts]
    elements = [n for n in nodes if n.id is not None]
    cands: list[Action] = []
    typeable = False
    for nd in elements:
        if any(r in nd.role for r in TYPEABLE):
            typeable = True
            cands += [Action.type(nd.id, t) for t in texts]
        if any(r == nd.role for r in SELECTABLE):
            cands += [Action.select(nd.id, name) for name in _option_names(nodes, nd)]
    cands += (
        [Action.press("Enter")] + ([Action.press("Tab")] if typeable else []) + [Action.stop("")]
    )
    cands += [Action.click(nd.id) for nd in elements]
    cands += [Action.scroll("down"), Action.scroll("up")]
    cands += pointer_candidates(obs.instruction, nodes)
    seen: set = set()
    out = []
    for a in cands:
        t = a.to_text()
        if t not in seen:
            seen.add(t)
            out.append(a)
    return out[:max_candidates]


def _option_names(nodes: list[Node], select: Node) -> list[str]:
    """The named options in the block of lines below ``select`` (a ``loose`` reading: the block
    ends at the first line not deeper than the select, or at a blank line)."""
    out = []
    for n in nodes[select.index + 1 :]:
        if n.blank or n.depth <= select.depth:
            break
        if n.role == "option" and n.name:
            out.append(n.name)
    return out


def candidates_hash(texts: list[str]) -> str:
    """Identity of a candidate set: sha1 of the texts joined by newlines, first 16 hex chars."""
    return hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest()[:16]


def policy_candidates(
    tokenizer: Tokenizer,
    obs: Observation,
    prompt_ids: list[int],
    max_positions: int,
    max_candidates: int = MAX_CANDIDATES,
) -> tuple[list[Action], list[list[int]]]:
    """C(s): the actions the policy chooses among after ``prompt_ids``, and their token ids.

    ``candidate_actions(obs, max_candidates)`` keeping those whose tokens (text +
    eos) fit the room left after the prompt; ``stop("")`` if none does.  Acting
    (``PolicyRunner``) and learning (``models.policy.loss``) both call this, so the
    distribution trained is the one sampled.
    """
    room = max_positions - len(prompt_ids)
    acts, ids = [], []
    for a in candidate_actions(obs, max_candidates):
        t = action_ids(tokenizer, a.to_text())
        if len(t) <= room:
            acts.append(a)
            ids.append(t)
    if not acts:
        acts, ids = [Action.stop("")], [action_ids(tokenizer, Action.stop("").to_text())]
    return acts, ids
