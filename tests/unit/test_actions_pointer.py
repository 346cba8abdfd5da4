"""The pointer/selection actions: hover, click_at, drag, select_text, key chords.

They parse, render and round-trip like the others, and a wrong argument list names the usage."""

from __future__ import annotations

import pytest

from core.spaces import Action, ActionParseError, key_error, parse_action, precheck_error


@pytest.mark.parametrize(
    "action,text",
    [
        (Action.hover(3), "hover(3)"),
        (Action.click_at(3, 12, 40), "click_at(3, 12, 40)"),
        (Action.click_at(3, -2, 0), "click_at(3, -2, 0)"),
        (Action.drag(3, 8), "drag(3, 8)"),
        (Action.drag(3, 8, 5, 60), "drag(3, 8, 5, 60)"),
        (
            Action.select_text(4, 'some "quoted", words'),
            'select_text(4, "some \\"quoted\\", words")',
        ),
        (Action.press("Control+a"), 'press("Control+a")'),
        (Action.press("Control+Shift+ArrowLeft"), 'press("Control+Shift+ArrowLeft")'),
    ],
)
def test_render_and_round_trip(action: Action, text: str) -> None:
    assert action.to_text() == text
    assert parse_action(text) == action
    assert parse_action(f"  {action.kind}( {text[len(action.kind) + 1 : -1]} )  ") == action


def test_fields() -> None:
    a = parse_action("drag(3, 8, 5, 60)")
    assert (a.element, a.target, a.x, a.y, a.text) == (3, 8, 5, 60, None)
    a = parse_action("click_at(7, 1, 2)")
    assert (a.element, a.target, a.x, a.y) == (7, None, 1, 2)
    assert parse_action("drag(3,8)") == Action("drag", 3, target=8)


@pytest.mark.parametrize(
    "bad,needle",
    [
        ("hover()", "needs an element id"),
        ('hover(3, "x")', "takes no text"),
        ("hover(3, 4)", "too many numbers"),
        ("click_at(3)", "needs a position"),
        ("click_at(3, 4)", "needs both x and y"),
        ("click_at(3, 4, 5, 6)", "too many numbers"),
        ('click_at(3, 4, 5, "x")', "takes no text"),
        ("click_at(3, 99999, 5)", "out of range"),
        ("drag(3)", "needs a target element id"),
        ("drag(3, 8, 1)", "needs both x and y"),
        ("drag(3, 8, 1, 2, 3)", "too many numbers"),
        ('drag(3, "8")', "needs a target element id"),
        ("select_text(4)", "needs a text argument"),
        ('select_text(4, "")', "non-empty"),
        ('select_text("x")', "needs an element id"),
        ('press("")', "non-empty"),
        ("click(3, 4)", "too many numbers"),
        ("fly(3)", "unknown action kind"),
    ],
)
def test_bad_arguments_name_the_problem(bad: str, needle: str) -> None:
    with pytest.raises(ActionParseError) as e:
        parse_action(bad)
    assert needle in str(e.value), str(e.value)
    if "usage" in str(e.value):
        assert "usage: " + bad.split("(")[0] in str(e.value)


def test_constructor_checks() -> None:
    with pytest.raises(ActionParseError):
        Action("drag", None, target=3)
    with pytest.raises(ActionParseError):
        Action("click_at", 3, x=1)
    with pytest.raises(ActionParseError):
        Action("hover", 3, x=1, y=2)
    with pytest.raises(ActionParseError):
        Action("click", 3, "x")


@pytest.mark.parametrize(
    "key,ok",
    [
        ("Enter", True),
        ("a", True),
        ("Control+a", True),
        ("Control+Shift+z", True),
        ("Shift+ArrowDown", True),
        ("Meta+Enter", True),
        ("Control++", True),
        ("Control+Control+a", False),
        ("Hyper+a", False),
        ("Control+", False),
        ("Control+Flurb", False),
        ("Flurb", False),
    ],
)
def test_key_chords(key: str, ok: bool) -> None:
    assert (key_error(key) == "") is ok, key_error(key)


def test_precheck_covers_the_new_actions() -> None:
    ids = [1, 2, 3]
    assert precheck_error(Action.hover(3), ids) == ""
    assert "[9]" in precheck_error(Action.hover(9), ids)
    assert "[9]" in precheck_error(Action.click_at(9, 1, 1), ids)
    assert "target [9]" in precheck_error(Action.drag(1, 9), ids)
    assert precheck_error(Action.drag(1, 2, 3, 4), ids) == ""
    assert "[9]" in precheck_error(Action.select_text(9, "x"), ids)
    assert "unknown key" in precheck_error(Action.press("Hyper+a"), ids)
    assert precheck_error(Action.press("Control+a"), ids) == ""
