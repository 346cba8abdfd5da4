"""The pointer actions without a browser: boxes in the observation (rendering, truncation, parsing),
the pointer candidates of C(s), the shared drop geometry, and the world model's drag proposals
and change format on pages with boxes."""

from __future__ import annotations

from collectors.observation import Line, truncate_lines
from core.boxes import drop_point, nudge_point, rel
from core.pagetree import parse_box, parse_tree
from core.spaces import Action, Observation, parse_action
from models.policy.candidates import candidate_actions
from models.policy.mouse_candidates import pointer_candidates
from models.world_model.change import apply_change, diff_to_change
from models.world_model.proposals import candidate_trees

SORTABLE = "\n".join(
    [
        '[1] generic clickable id="sortable" class="ui-sortable"',
        '  [2] listitem "Willa" box="10,57,134,26"',
        '  [3] listitem "Gerda" box="10,86,134,26"',
        '  [4] listitem "Alvera" box="10,114,134,26"',
    ]
)
SVG = "\n".join(
    [
        '[1] svg clickable box="2,52,150,130"',
        '  [2] circle box="8,68,7,7"',
        '  [3] circle box="80,119,7,7"',
        '[4] button "Submit"',
    ]
)


def _obs(tree: str, instruction: str) -> Observation:
    return Observation(instruction=instruction, url="", tree=tree)


def test_box_is_never_shortened_and_parses_back() -> None:
    box_line = Line(1, 5, "circle", "", [("box", "1234,5678,90,12")], True)
    long_text = Line(0, None, "text", "x" * 400, [], False)
    text, info = truncate_lines([long_text, box_line] * 3, budget=120)
    assert info["truncated"]
    assert 'box="1234,5678,90,12"' in text  # kept whole, where a value would be cut to 16 bytes
    nodes = parse_tree(text)
    assert any(n.box == (1234, 5678, 90, 12) for n in nodes)
    assert parse_box("1,2,3") is None and parse_box(None) is None
    assert parse_tree('[7] listitem "A" box="-3,4,5,6"', loose=True)[0].box == (-3, 4, 5, 6)


def test_drop_geometry() -> None:
    # moving down onto the next item: a quarter past its middle, horizontally centred
    assert drop_point((10, 86, 134, 26), (10, 114, 134, 26)) == (67, 20)
    assert drop_point((10, 114, 134, 26), (10, 57, 134, 26)) == (67, 6)
    assert rel((2, 52, 150, 130), 32.5, 90) == (30, 38)
    assert nudge_point((8, 68, 8, 8), (2, 52, 150, 130), "left") == (-10, 20)


def test_sortable_page_offers_the_drops_past_the_middle() -> None:
    texts = [a.to_text() for a in candidate_actions(_obs(SORTABLE, "Drag Gerda to the top."))]
    assert "drag(3, 2, 67, 6)" in texts and "drag(3, 4, 67, 20)" in texts
    assert sum(t.startswith("drag(") for t in texts) == 6  # 3 items x 2 others
    # the instruction asks for nothing to drag: no drag candidates, the set is as before
    plain = [a.to_text() for a in candidate_actions(_obs(SORTABLE, "Click on Gerda."))]
    assert not any(t.startswith("drag(") for t in plain)


def test_svg_page_offers_centres_midpoints_and_nudges() -> None:
    texts = [a.to_text() for a in candidate_actions(_obs(SVG, "Find the mid-point"))]
    assert "click_at(1, 75, 65)" in texts  # the svg's centre
    assert "click_at(1, 10, 20)" in texts  # circle [2]'s centre (11.5, 71.5) -> (10, 20)
    assert "click_at(1, 46, 45)" in texts  # the midpoint of the two circles
    assert not any(t.startswith(("drag(", "hover(")) for t in texts)
    drags = [a.to_text() for a in pointer_candidates("Drag the circle left", parse_tree(SVG, True))]
    assert (
        "drag(2, 3)" in drags and "drag(2, 1, -10, 20)" in drags and "drag(2, 1, -30, 20)" in drags
    )
    hovers = pointer_candidates("Keep your mouse inside the circle", parse_tree(SVG, True))
    assert Action.hover(2) in hovers and Action.hover(1) not in hovers


def test_text_pages_offer_selections_and_chords() -> None:
    tree = '[1] svg box="9,57,18,18"\n[5] textbox value="Donec at eget."\n[7] button "Submit"'
    got = pointer_candidates("give the text at the style bold", parse_tree(tree, loose=True))
    assert Action.select_text(5, "at") in got and Action.select_text(5, "Donec at eget.") in got
    assert Action.press("Control+b") in got
    para = '[1] button "Submit"\n[2] text "Lorem ipsum dolor"'
    sel = pointer_candidates("Highlight the text in the paragraph", parse_tree(para, loose=True))
    assert sel == [Action.select_text(2, "Lorem ipsum dolor")]
    assert pointer_candidates("Click Submit", parse_tree(para, loose=True)) == []


def test_every_candidate_round_trips_its_text() -> None:
    for tree, instr in ((SORTABLE, "Drag Gerda up"), (SVG, "Drag the circle right")):
        for a in candidate_actions(_obs(tree, instr)):
            assert parse_action(a.to_text()) == a


def test_world_model_proposes_the_drag_outcomes_and_the_change_format_carries_them() -> None:
    obs = _obs(SORTABLE, "Drag Gerda to the top.")
    trees = candidate_trees(obs, parse_action("drag(3, 2, 67, 6)"))
    reordered = SORTABLE.split("\n")
    reordered.insert(1, reordered.pop(2))
    assert "\n".join(reordered) in trees
    svg_trees = candidate_trees(_obs(SVG, "Drag"), Action.drag(2, 1, 40, 20))
    assert any('[2] circle box="38,68,7,7"' in t for t in svg_trees)  # centre on (42, 72)
    for new in trees + svg_trees:
        assert (
            apply_change(
                obs.tree if new in trees else SVG,
                diff_to_change(obs.tree if new in trees else SVG, new),
            )
            == new
        )
