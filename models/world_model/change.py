"""The executable change format: what the world model writes, what gets applied.

Pure functions, no torch.  A page is its accessibility tree as text, one element
per line (``[3] button "Submit"``, two spaces of indentation per level).  The
world model writes a short description and an edit script anchored on element
ids, then the reward and the done flag::

    why: 2 changed, 1 added, 0 removed
    replace [5] [5] textbox "Name" value="Kiera"
    replace [6]+1   option "B" selected
    insert after [5]   [+] text "Thanks!"
    reward 0
    done 0

Ops (applied in order, each anchor looked up in the page *as edited so far*):

``same``                       nothing changes (also: no ops at all)
``remove <anchor>``            delete that line
``replace <anchor> <line>``    replace that line by ``<line>``
``insert after <anchor> <line>``   insert ``<line>`` below it
``insert before <anchor> <line>``  insert ``<line>`` above it (page start)
``page``                       every following line (up to the reward/done
                               trailer) is the whole new page (navigation);
                               lines that read like the trailer or start with
                               ``\\`` are escaped with a leading ``\\``.

``<anchor>`` is ``[id]`` (the line of element ``id``) or ``[id]+k`` (the k-th
line below it, for lines without an id such as ``option "B" selected`` or loose
``text``; only id-less lines may lie in between); ``[0]+k`` counts from the top
of the page (lines above the first element).  ``<line>`` is taken verbatim
after the single space that follows the anchor (so it carries its own
indentation); ``[+]`` in place of the id (after the indentation) means *the
next free id* (``max(next_id, max id in page + 1)``, increasing with each use;
an explicit id at or above it moves it on), so new element lines take the next
free id without the model counting.

``diff_to_change(a, b)`` computes the training target from a real transition
(line diff, shortest form, ``page`` whenever the edit script does not
reproduce ``b`` exactly), so ``apply_change(a, diff_to_change(a, b)) == b`` for
every pair of strings.  ``parse_model_output`` never raises: it repairs
(drops bad ops, with the reason) or rejects (``ok`` False, with the reason).
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter

_ID_AT_START = re.compile(r"^(\s*)\[(\d+)\]")
_ANCHOR = r"\[(\d+)\](?:\+(\d+))?"
_AUTO = re.compile(r"^(\s*)\[\+\]")
_OP_REMOVE = re.compile(r"^remove " + _ANCHOR + r"\s*$")
_OP_REPLACE = re.compile(r"^replace " + _ANCHOR + r"(?: (.*))?$")
_OP_INSERT = re.compile(r"^insert (after|before) " + _ANCHOR + r"(?: (.*))?$")
_REWARD = re.compile(r"^\s*reward:?\s+(\S+)\s*$")
_DONE = re.compile(r"^\s*done:?\s+(\S+)\s*$")


class ChangeError(ValueError):
    """An op that cannot be applied to the given page (reason in the message)."""


def _escape(line: str) -> str:
    """Page-block lines that could read as a trailer (or start with ``\\``) get a ``\\``."""
    if line.startswith("\\") or _REWARD.match(line) or _DONE.match(line):
        return "\\" + line
    return line


def line_id(line: str) -> int | None:
    m = _ID_AT_START.match(line)
    return int(m.group(2)) if m else None


def _ids(lines: list[str]) -> list[int]:
    return [i for i in (line_id(x) for x in lines) if i is not None]


def _first_free(lines: list[str], next_id: int | None) -> int:
    return max([next_id or 1] + [i + 1 for i in _ids(lines)])


# --- parsing the ops -----------------------------------------------------------


def _parse_ops(lines: list[str]) -> tuple[list[tuple], list[str]]:
    """Lines (no why, no trailer) -> (ops, problems).  ``page`` takes the rest."""
    ops: list[tuple] = []
    problems: list[str] = []
    for n, raw in enumerate(lines):
        line = raw.rstrip("\r")
        if line == "page" or line.startswith("page "):
            block = [x[1:] if x.startswith("\\") else x for x in lines[n + 1 :]]
            ops.append(("page", "\n".join(block)))
            return ops, problems
        if line.strip() == "same":
            ops.append(("same",))
        elif m := _OP_REMOVE.match(line):
            ops.append(("remove", (int(m.group(1)), int(m.group(2) or 0))))
        elif m := _OP_REPLACE.match(line):
            ops.append(("replace", (int(m.group(1)), int(m.group(2) or 0)), m.group(3) or ""))
        elif m := _OP_INSERT.match(line):
            ops.append(
                ("insert_" + m.group(1), (int(m.group(2)), int(m.group(3) or 0)), m.group(4) or "")
            )
        elif line.strip():
            problems.append(f"unknown op {line[:40]!r}")
    return ops, problems


def _split_trailer(lines: list[str]) -> tuple[list[str], float | None, bool | None]:
    """Strip the trailing ``reward``/``done`` lines (either order, blank lines around)."""
    reward: float | None = None
    done: bool | None = None
    end = len(lines)
    for _ in range(2):
        k = end
        while k > 0 and not lines[k - 1].strip():
            k -= 1
        if k == 0:
            break
        last = lines[k - 1]
        if reward is None and (m := _REWARD.match(last)):
            try:
                reward = float(m.group(1))
            except ValueError:
                break
            end = k - 1
        elif done is None and (m := _DONE.match(last)):
            v = m.group(1).lower()
            if v not in ("0", "1", "true", "false"):
                break
            done = v in ("1", "true")
            end = k - 1
        else:
            break
    return lines[:end], reward, done


# --- applying ------------------------------------------------------------------


def _anchor_text(anchor: tuple[int, int]) -> str:
    el, k = anchor
    return f"[{el}]" + (f"+{k}" if k else "")


class _Page:
    def __init__(self, tree: str, next_id: int | None):
        self.lines = tree.split("\n")
        self.free = _first_free(self.lines, next_id)

    def find(self, anchor: tuple[int, int]) -> int:
        el, k = anchor
        if el == 0 and k > 0:
            base = -1
        else:
            base = next((i for i, x in enumerate(self.lines) if line_id(x) == el), None)
            if base is None:
                raise ChangeError(f"no element [{el}] on the page")
        idx = base + k
        if idx >= len(self.lines):
            raise ChangeError(f"{_anchor_text(anchor)} is past the end of the page")
        if any(line_id(x) is not None for x in self.lines[base + 1 : idx + 1]):
            raise ChangeError(f"{_anchor_text(anchor)} crosses an element line")
        return idx

    def address(self, idx: int) -> tuple[int, int]:
        """The anchor of line ``idx`` (nearest element line above it + offset)."""
        for j in range(idx, -1, -1):
            el = line_id(self.lines[j])
            if el is not None:
                return (el, idx - j)
        return (0, idx + 1)

    def materialise(self, text: str) -> str:
        m = _AUTO.match(text)
        if m:
            new_id = self.free
            self.free += 1
            return f"{m.group(1)}[{new_id}]" + text[m.end() :]
        el = line_id(text)
        if el is not None:
            self.free = max(self.free, el + 1)
        return text

    def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "same":
            return
        if kind == "page":
            self.lines = op[1].split("\n")
            self.free = _first_free(self.lines, self.free)
            return
        i = self.find(op[1])
        if kind == "remove":
            del self.lines[i]
        elif kind == "replace":
            self.lines[i] = self.materialise(op[2])
        elif kind == "insert_after":
            self.lines.insert(i + 1, self.materialise(op[2]))
        elif kind == "insert_before":
            self.lines.insert(i, self.materialise(op[2]))
        else:  # pragma: no cover - ops come from _parse_ops
            raise ChangeError(f"unknown op {kind}")

    def tree(self) -> str:
        return "\n".join(self.lines)


def apply_change(tree: str, change: str, next_id: int | None = None) -> str:
    """Apply an edit script (with or without why/trailer) to ``tree``; deterministic.

    Raises ``ChangeError`` on an op that does not apply (use ``parse_model_output``
    with ``tree=`` first for untrusted text: it drops such ops).
    """
    lines = change.split("\n")
    if lines and lines[0].startswith("why:"):
        lines = lines[1:]
    body, _, _ = _split_trailer(lines) if not _has_page(lines) else _split_page_trailer(lines)
    ops, problems = _parse_ops(body)
    if problems:
        raise ChangeError("; ".join(problems))
    page = _Page(tree, next_id)
    for op in ops:
        page.apply(op)
    return page.tree()


def _has_page(lines: list[str]) -> bool:
    return any(x == "page" or x.startswith("page ") for x in lines)


def _split_page_trailer(lines: list[str]) -> tuple[list[str], float | None, bool | None]:
    """Inside a page block only an unescaped reward/done line can end it."""
    start = next(i for i, x in enumerate(lines) if x == "page" or x.startswith("page "))
    for k in range(start + 1, len(lines)):
        if _REWARD.match(lines[k]) or _DONE.match(lines[k]):
            body, r, d = _split_trailer(lines[k:])
            if not body:
                return lines[:k], r, d
    return lines, None, None


# --- diffing -------------------------------------------------------------------


def _payload(line: str, free: int) -> str:
    """``[+]`` for the next free id when that is the line's id; else the line verbatim."""
    m = _ID_AT_START.match(line)
    if m and int(m.group(2)) == free:
        return f"{m.group(1)}[+]" + line[m.end() :]
    return line


def _edit_ops(a: list[str], b: list[str], next_id: int | None) -> tuple[list[str], Counter]:
    """Ops for the line diff; page state before each opcode is ``b[:j1] + a[i1:]``."""
    out: list[str] = []
    counts: Counter = Counter()
    sim = _Page("\n".join(a), next_id)

    def emit(op: tuple) -> None:
        out.append(_op_text(op))
        sim.apply(op)

    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        old, new = a[i1:i2], b[j1:j2]
        n = min(len(old), len(new)) if tag == "replace" else 0
        for k in range(n):
            emit(("replace", sim.address(j1 + k), _payload(new[k], sim.free)))
            counts["changed"] += 1
        for _ in old[n:]:
            emit(("remove", sim.address(j1 + n)))
            counts["removed"] += 1
        for k, line in enumerate(new[n:]):
            pos = j1 + n + k
            if pos > 0:
                emit(("insert_after", sim.address(pos - 1), _payload(line, sim.free)))
            elif pos < len(sim.lines):
                emit(("insert_before", sim.address(0), _payload(line, sim.free)))
            else:
                raise ChangeError("no anchor")
            counts["added"] += 1
    return out, counts


def diff_to_change(obs_tree: str, next_tree: str, next_id: int | None = None) -> str:
    """The change (why line + edit script, no trailer) turning ``obs_tree`` into ``next_tree``."""
    if obs_tree == next_tree:
        return "why: nothing changes\nsame"
    page = "why: navigates to a new page\npage\n" + "\n".join(
        _escape(x) for x in next_tree.split("\n")
    )
    try:
        ops, c = _edit_ops(obs_tree.split("\n"), next_tree.split("\n"), next_id)
    except ChangeError:
        return page
    why = f"why: {c['changed']} changed, {c['added']} added, {c['removed']} removed"
    text = "\n".join([why] + ops)
    try:
        if apply_change(obs_tree, text, next_id) != next_tree:
            return page
    except ChangeError:
        return page
    return text if len(text) <= len(page) else page


# --- model output --------------------------------------------------------------


def format_output(change: str, reward: float, done: bool) -> str:
    """The full world-model target: change + ``reward <r>`` + ``done <0|1>``."""
    r = float(reward)
    rs = str(int(r)) if r.is_integer() else f"{r:g}"
    return f"{change}\nreward {rs}\ndone {int(bool(done))}"


def parse_model_output(
    text: str, tree: str | None = None, next_id: int | None = None
) -> tuple[str, float, bool, bool, str]:
    """World-model text -> (change, reward, done, ok, reason); never raises.

    ``change`` is the canonical why line + the ops that parse (and, when ``tree``
    is given, that apply to it, in order).  Repairs are listed in ``reason`` with
    ``ok`` True; a rejection (no reward/done trailer, a bad reward, every op bad)
    gives ``ok`` False, ``change`` = ``same`` and ``reward`` 0 / ``done`` False.
    """
    rejected = ("why: rejected\nsame", 0.0, False, False)
    try:
        lines = (text or "").replace("\r\n", "\n").split("\n")
        why = "why: (none)"
        problems: list[str] = []
        if lines and lines[0].strip().startswith("why:"):
            why = lines[0].strip()
            lines = lines[1:]
        else:
            problems.append("missing why line")
        split = _split_page_trailer(lines) if _has_page(lines) else _split_trailer(lines)
        body, reward, done = split
        if reward is None or done is None:
            return (*rejected, "missing reward/done trailer (truncated output?)")
        if not math.isfinite(reward):
            return (*rejected, f"reward {reward} is not finite")
        ops, bad = _parse_ops(body)
        problems += bad
        if any(op[0] == "page" for op in ops) and len(ops) > 1:
            problems.append(f"dropped {len(ops) - 1} op(s) before page")
            ops = ops[-1:]
        if len(ops) > 1 and any(op[0] == "same" for op in ops):
            ops = [op for op in ops if op[0] != "same"]
            problems.append("dropped 'same' mixed with edits")
        if tree is not None:
            sim, kept = _Page(tree, next_id), []
            for op in ops:
                try:
                    sim.apply(op)
                    kept.append(op)
                except ChangeError as e:
                    problems.append(f"dropped op: {e}")
            ops = kept
        n_bad = len(bad) + sum(p.startswith("dropped op") for p in problems)
        if not ops and n_bad:
            return (*rejected, "no valid op: " + "; ".join(problems))
        change = "\n".join([why] + [_op_text(op) for op in ops] if ops else [why, "same"])
        return change, float(reward), bool(done), True, "; ".join(problems)
    except Exception as e:  # noqa: BLE001 - the contract is: never raise
        return (*rejected, f"internal parse error: {type(e).__name__}: {e}")


def _op_text(op: tuple) -> str:
    kind = op[0]
    if kind == "same":
        return "same"
    if kind == "page":
        return "page\n" + "\n".join(_escape(x) for x in op[1].split("\n"))
    if kind == "remove":
        return f"remove {_anchor_text(op[1])}"
    if kind == "replace":
        return f"replace {_anchor_text(op[1])} {op[2]}"
    return f"insert {kind[len('insert_') :]} {_anchor_text(op[1])} {op[2]}"


# --- fidelity helpers ------------------------------------------------------------


def changed_lines(a: str, b: str) -> Counter:
    """Multiset of ``-line`` / ``+line`` that turn page ``a`` into page ``b``."""
    out: Counter = Counter()
    for tok in difflib.ndiff(a.split("\n"), b.split("\n")):
        if tok[:2] in ("- ", "+ "):
            out[tok[0] + tok[2:]] += 1
    return out


def change_f1(obs_tree: str, predicted_tree: str, real_tree: str) -> float:
    """Line-level F1 between the predicted and the real change (1.0 if both empty)."""
    p, r = changed_lines(obs_tree, predicted_tree), changed_lines(obs_tree, real_tree)
    if not p and not r:
        return 1.0
    tp = sum((p & r).values())
    if tp == 0:
        return 0.0
    prec, rec = tp / sum(p.values()), tp / sum(r.values())
    return 2 * prec * rec / (prec + rec)
