"""The world model's output text and what a prediction is made of.

The model writes ``models.world_model.change.format_output(...)`` text after the prompt of
``models.lm.prompts.world_model_prompt_ids``: a ``why:`` line, the edit script, then ``reward``
and ``done``.  ``change_target`` is that text for a real transition (what the loss trains);
``candidate_outputs`` the full outputs ``decode="rerank"`` scores (every proposal's page with
every ``TRAILERS`` pair, and the generated text); ``Prediction`` what
``models.world_model.runner.WorldModelRunner.predict`` returns per row, around
``next_observation``.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.spaces import Action, Observation, ids_in_tree
from models.world_model.change import diff_to_change, format_output, parse_model_output
from models.world_model.proposals import candidate_trees


def change_target(obs: Observation, next_obs: Observation, reward: float, done: bool) -> str:
    """Training target text for a real transition."""
    return format_output(diff_to_change(obs.tree, next_obs.tree, next_id=obs.next_id), reward, done)


@dataclass
class Prediction:
    next_obs: Observation
    reward: float
    done: bool
    ok: bool
    reason: str
    text: str
    obs_tree: str = ""  # the page the change was applied to (for fidelity)
    # diagnostics: the text's own reward/done lines (0 / not done when rejected), and the heads'
    # probabilities (None when the heads are not trained: reward and done are then the text's)
    text_reward: float = 0.0
    text_done: bool = False
    p_success: float | None = None
    p_done: float | None = None
    # the ensemble's (``models.world_model.ensemble``): the members' mean p(success) and its
    # standard deviation, the disagreement (None without a trained ensemble or trained heads)
    ensemble_mean: float | None = None
    disagreement: float | None = None


def next_observation(obs: Observation, tree: str, action: Action | None) -> Observation:
    """The predicted next observation around a predicted tree."""
    ids = ids_in_tree(tree)
    focused = obs.focused if obs.focused in ids else None
    if action is not None and action.kind in ("click", "type", "select") and action.element in ids:
        focused = action.element
    return Observation(
        instruction=obs.instruction,
        url=obs.url,
        tree=tree,
        focused=focused,
        last_action_error="",
        next_id=max([obs.next_id] + [i + 1 for i in ids]),
        element_ids=ids,
    )


TRAILERS = ((0.0, False), (1.0, True), (-1.0, True))  # (reward, done): step, success, failure


def candidate_outputs(
    obs: Observation, action: Action | None, generated: str | None = None
) -> list[str]:
    """Full world-model outputs to score: every candidate tree's change x every trailer,
    plus the freely generated text (if it parses) and its change with every trailer."""
    changes = [
        diff_to_change(obs.tree, t, next_id=obs.next_id) for t in candidate_trees(obs, action)
    ]
    out = []
    if (
        generated is not None
    ):  # kept when it parses (a rejected text would only mean "unchanged, reward 0")
        change, _r, _d, ok, _why = parse_model_output(generated, tree=obs.tree, next_id=obs.next_id)
        if ok:
            out.append(generated)
            changes.append(change)
    for c in dict.fromkeys(changes):
        out += [format_output(c, r, d) for r, d in TRAILERS]
    return list(dict.fromkeys(out))
