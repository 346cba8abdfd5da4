"""Observation text, ids and truncation, on fake tree data (no browser)."""

from __future__ import annotations

from collectors.observation import (
    MAX_STRING,
    Line,
    ObservationBuilder,
    render_lines,
    truncate_lines,
)
from core.pagetree import parse_tree
from core.spaces import Observation, ids_in_tree


def _raw(
    lines: list,
    next_id: int,
    focused=None,
    url="http://127.0.0.1:9/miniwob/click-button.html?dw_seed=3",
    done=False,
    reward=0.0,
) -> dict:
    return {
        "lines": lines,
        "next": next_id,
        "focused": focused,
        "instruction": 'Click on the "Ok" button.',
        "url": url,
        "done": done,
        "raw_reward": reward,
        "reward": reward,
        "reason": None,
        "ready": True,
    }


PAGE = [
    [0, 1, "text", "cursus dis justo", [], 0],
    [0, 2, "button", "Ok", [], 1],
    [0, 3, "dialog", "", [["clickable", None]], 1],
    [1, 4, "textbox", "Name", [["value", 'say "hi"']], 1],
    [1, None, "text", "loose text", [], 0],
    [1, 5, "combobox", "", [["value", "B"]], 1],
    [2, None, "option", "A", [], 0],
    [2, None, "option", "B", [["selected", None]], 0],
]


def test_text_form_lines_and_indentation() -> None:
    b = ObservationBuilder(budget=None, strip_origin="http://127.0.0.1:9")
    obs, st = b.build(_raw(PAGE, 6, focused=4))
    assert obs.tree.splitlines() == [
        '[1] text "cursus dis justo"',
        '[2] button "Ok"',
        "[3] dialog clickable",
        '  [4] textbox "Name" value="say \\"hi\\""',
        '  text "loose text"',
        '  [5] combobox value="B"',
        '    option "A"',
        '    option "B" selected',
    ]
    assert obs.focused == 4 and obs.next_id == 6
    assert obs.element_ids == [1, 2, 3, 4, 5] == ids_in_tree(obs.tree)
    assert obs.url == "/miniwob/click-button.html"  # no origin/port, no seed parameter
    assert st.all_ids == {1, 2, 3, 4, 5}
    assert "Focused: [4]" in obs.render() and obs.render().startswith(
        'Task: Click on the "Ok" button.'
    )
    assert "ref" not in obs.tree


def test_same_state_same_text_and_next_id_only_grows() -> None:
    b = ObservationBuilder(budget=None)
    o1, _ = b.build(_raw(PAGE, 6))
    o2, _ = b.build(_raw(PAGE, 6))
    assert o1.tree == o2.tree and o1.to_dict() == o2.to_dict()
    # a later element took id 6; the page then navigated (the page-side counter restarted)
    o3, _ = b.build(_raw(PAGE + [[0, 6, "button", "New", [], 1]], 7))
    assert o3.element_ids[-1] == 6 and o3.next_id == 7
    o4, _ = b.build(_raw([[0, 7, "link", "x", [], 1]], 2))
    assert o4.next_id == 7  # never goes back: ids are not reused within an episode


def test_observation_dict_round_trip() -> None:
    obs, _ = ObservationBuilder(budget=None).build(_raw(PAGE, 6, focused=2))
    assert Observation.from_dict(obs.to_dict()) == obs


def test_no_truncation_under_budget() -> None:
    lines = [Line(0, 1, "button", "Ok", [], True)]
    text, info = truncate_lines(lines, 512)
    assert text == '[1] button "Ok"' and not info["truncated"]


def _many(n_text: int, n_act: int, text_len: int = 40) -> list[Line]:
    out = []
    for i in range(n_text):
        out.append(Line(0, i + 1, "text", "w" * text_len, [], False))
    for j in range(n_act):
        out.append(Line(0, n_text + j + 1, "button", f"Button number {j}", [], True))
    return out


def test_truncation_drops_non_actionable_text_first() -> None:
    lines = _many(20, 5)
    text, info = truncate_lines(lines, 200)
    assert len(text.encode()) <= 200
    assert info["truncated"] and info["dropped_text"] > 0 and info["dropped_tail"] == 0
    assert all(
        f'button "Button number {j}"' in text for j in range(5)
    )  # every actionable line kept


def test_truncation_then_shortens_long_strings() -> None:
    lines = [Line(0, i + 1, "button", f"{i} " + "x" * 100, [], True) for i in range(4)]
    text, info = truncate_lines(lines, 200)
    assert len(text.encode()) <= 200 and info["shortened_to"] in (64, 32, 16)
    assert ids_in_tree(text) == [1, 2, 3, 4] and "…" in text


def test_truncation_cuts_the_tail_last_with_a_marker() -> None:
    lines = [Line(0, i + 1, "button", f"b{i}", [], True) for i in range(100)]
    text, info = truncate_lines(lines, 120)
    assert len(text.encode()) <= 120 and info["dropped_tail"] > 0
    assert text.splitlines()[-1].startswith("... (") and ids_in_tree(text)[0] == 1


def test_truncation_keeps_containers_of_kept_children() -> None:
    lines = [
        Line(0, 1, "row", "", [], False),
        Line(1, 2, "cell", "c" * 50, [], False),
        Line(1, 3, "textbox", "", [], True),
    ] + [Line(0, 10 + i, "text", "t" * 30, [], False) for i in range(5)]
    text, _ = truncate_lines(lines, 60)
    assert text.splitlines()[:2] == ["[1] row", "  [3] textbox"]


def test_strings_are_capped_and_cut_on_utf8_boundaries() -> None:
    lines = [Line(0, 1, "text", "é" * 400, [], False)]
    text = render_lines(lines)
    assert len(text.encode()) <= MAX_STRING + 20
    text.encode().decode()  # valid UTF-8
    t2, _ = truncate_lines([Line(0, 1, "button", "日本" * 50, [], True)], 40)
    assert len(t2.encode()) <= 40 and t2.startswith("[1] button")


def test_budget_with_another_tokenizer() -> None:
    lines = _many(10, 3)
    words = lambda s: len(s.split())  # noqa: E731 - a toy "tokenizer"
    text, info = truncate_lines(lines, 12, measure=words)
    assert words(text) <= 12 and info["truncated"]


def test_parse_tree_reads_the_text_form_back() -> None:
    obs, _ = ObservationBuilder(budget=None).build(_raw(PAGE, 6))
    nodes = parse_tree(obs.tree)
    assert [n.id for n in nodes] == [1, 2, 3, 4, None, 5, None, None]
    tb = nodes[3]
    assert tb.role == "textbox" and tb.name == "Name" and tb.value == 'say "hi"' and tb.parent == 2
    combo = nodes[5]
    assert [nodes[i].name for i in combo.children] == ["A", "B"] and nodes[7].has("selected")
