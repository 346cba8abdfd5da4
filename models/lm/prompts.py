"""THE prompt formats of the policy and the world model (one home, used by
acting, dreaming and training alike, so the log-probabilities agree).

Policy prompt (the action text follows it, then eos)::

    Task: <instruction>
    Page:
    <tree>
    Focused: [n]                       (only when something is focused)
    Error: <last action error>         (only when there was one)
    History: click(3); type(5, "hi")   (last HISTORY_K actions, oldest first; "none")
    Action: <action text><eos>

World-model prompt (the change target follows it, then eos)::

    Task: <instruction>
    Page:
    <tree>
    Focused: [n] / Error: ...          (as above)
    Action: click(3)
    Change:
    why: ...                           (target: models.world_model.change.format_output)
    ...
    reward 0
    done 0<eos>

The observation part is ``Observation.render()`` (core/spaces.py).
``history`` is the list of previous action texts of the same episode.

Fitting ``max_positions`` (deterministic): the instruction is cut in the middle
to at most a quarter of the prompt budget; the history keeps its newest actions;
then whole tree lines are dropped from the *middle* of the tree (the first two
thirds of the budget come from the top, the rest from the bottom) and replaced by
one ``... (N lines omitted)`` line; a single over-long line is cut in the middle.
As a last guard the token ids are cut in the middle so that the head (task) and
the tail (history + ``Action:``) always survive.
"""

from __future__ import annotations

from dataclasses import replace

from core.spaces import Observation
from models.lm.tokenizer import encode
from models.lm.types import Tokenizer

HISTORY_K = 4
POLICY_ACTION_RESERVE = 96  # tokens kept free for the action (+eos) after the prompt
OMITTED = "... ({n} lines omitted)"


def _cut_middle(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    if max_chars <= 5:
        return text[:max_chars]
    head = (max_chars - 3) * 2 // 3
    tail = max_chars - 3 - head
    return text[:head] + "..." + (text[-tail:] if tail else "")


def history_line(history: list[str], k: int = HISTORY_K) -> str:
    last = [h for h in history if h][-k:] if k > 0 else []
    return "History: " + ("; ".join(last) if last else "none")


def fit_tree(tree: str, budget: int, count) -> str:
    """Drop whole lines from the middle of ``tree`` so that ``count(tree) <= budget``."""
    if count(tree) <= budget:
        return tree
    lines = tree.split("\n")
    sizes = [count(x) + 1 for x in lines]
    marker_cost = count(OMITTED.format(n=len(lines))) + 1
    avail = max(0, budget - marker_cost)
    head_budget = avail * 2 // 3
    head, used = 0, 0
    while head < len(lines) and used + sizes[head] <= head_budget:
        used += sizes[head]
        head += 1
    tail, tail_used = len(lines), 0
    while tail > head and used + tail_used + sizes[tail - 1] <= avail:
        tail_used += sizes[tail - 1]
        tail -= 1
    kept = lines[:head] + ([OMITTED.format(n=tail - head)] if tail > head else []) + lines[tail:]
    out = "\n".join(kept)
    if count(out) > budget:  # a single huge line: cut characters (bytes ~ tokens)
        out = _cut_middle(out, max(1, budget))
        while out and count(out) > budget:
            out = _cut_middle(out, len(out) - max(1, (count(out) - budget)))
    return out


def _fit(tokenizer: Tokenizer, obs: Observation, tail: str, budget: int) -> list[int]:
    """Render ``obs`` + ``tail`` into at most ``budget`` tokens."""

    def count(s: str) -> int:
        return len(encode(tokenizer, s))

    instr = obs.instruction
    if count(instr) > budget // 4:
        instr = _cut_middle(instr, max(8, budget // 4))
    o = replace(obs, instruction=instr, tree="")
    fixed = count(o.render() + "\n" + tail)
    tree = fit_tree(obs.tree, max(0, budget - fixed - 1), count)
    ids = encode(tokenizer, replace(o, tree=tree).render() + "\n" + tail)
    if len(ids) > budget:
        tail_ids = encode(tokenizer, "\n" + tail)[-budget // 2 :]
        ids = ids[: budget - len(tail_ids)] + tail_ids
    return ids


def policy_prompt_ids(
    tokenizer: Tokenizer,
    obs: Observation,
    history: list[str],
    max_positions: int,
    reserve: int = POLICY_ACTION_RESERVE,
) -> list[int]:
    """Token ids of the policy prompt (ends with ``Action: ``), within ``max_positions - reserve``."""
    tail = history_line(history) + "\nAction: "
    return _fit(tokenizer, obs, tail, max(16, max_positions - reserve))


def policy_prompt(obs: Observation, history: list[str]) -> str:
    """Untruncated prompt text (for reading and debugging)."""
    return obs.render() + "\n" + history_line(history) + "\nAction: "


def action_ids(tokenizer: Tokenizer, action_text: str) -> list[int]:
    """The tokens the policy generates for an action: its text, then eos."""
    return encode(tokenizer, action_text) + [int(tokenizer.eos_token_id)]


def world_model_prompt_ids(
    tokenizer: Tokenizer, obs: Observation, action_text: str, max_positions: int, reserve: int
) -> list[int]:
    """Token ids of the world-model prompt (ends with ``Change:\\n``).

    ``reserve`` = tokens kept free for the change (``DreamConfig.max_change_tokens``).
    """
    a = action_text if len(action_text) <= 200 else _cut_middle(action_text, 200)
    tail = f"Action: {a}\nChange:\n"
    return _fit(tokenizer, obs, tail, max(16, max_positions - reserve))


def world_model_prompt(obs: Observation, action_text: str) -> str:
    return obs.render() + f"\nAction: {action_text}\nChange:\n"
