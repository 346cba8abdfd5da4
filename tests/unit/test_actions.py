"""Action text form: every action round-trips exactly (quotes, unicode, escapes)."""

from __future__ import annotations

import pytest

from core.spaces import Action, ActionParseError, parse_action

TEXTS = [
    "",
    "hello world",
    'say "hi"',
    "back\\slash",
    "tab\tand\nnewline",
    "Cancél",
    "日本語テキスト",
    "emoji 🙂👍",
    "comma, inside",
    "paren ) inside (",
    "  leading and trailing  ",
    "'single'",
    '"',
    '\\"',
    "a" * 500,
    "null\u0000byte",
    "\u2028line sep",
    "click(3)",
    'type(1, "x")',
]


@pytest.mark.parametrize("text", TEXTS)
def test_type_select_stop_round_trip(text: str) -> None:
    for a in (Action.type(5, text), Action.select(12, text), Action.stop(text)):
        s = a.to_text()
        assert parse_action(s) == a, s


@pytest.mark.parametrize(
    "action",
    [
        Action.click(1),
        Action.click(12345),
        Action.press("Enter"),
        Action.press("Tab"),
        Action.scroll("up"),
        Action.scroll("down"),
        Action.go_back(),
        Action.stop(),
        Action.press("ArrowDown"),
        Action.stop("42"),
    ],
)
def test_simple_round_trip(action: Action) -> None:
    assert parse_action(action.to_text()) == action


@pytest.mark.parametrize(
    "text,expected",
    [
        ("click(3)", Action.click(3)),
        ("  click( 3 )  ", Action.click(3)),
        ('type(5, "hello")', Action.type(5, "hello")),
        ('type(5,"hello")', Action.type(5, "hello")),
        ('select(7, "Option B")', Action.select(7, "Option B")),
        ('press("Enter")', Action.press("Enter")),
        ('scroll("down")', Action.scroll("down")),
        ("go_back()", Action.go_back()),
        ("stop()", Action.stop("")),
        ('stop("answer")', Action.stop("answer")),
        ('type(2, "unicode \\u00e9")', Action.type(2, "unicode é")),
    ],
)
def test_parse_known_forms(text: str, expected: Action) -> None:
    assert parse_action(text) == expected


def test_text_form_is_json_with_unicode_kept() -> None:
    assert Action.type(1, "Cancél").to_text() == 'type(1, "Cancél")'
    assert Action.type(1, 'a"b').to_text() == 'type(1, "a\\"b")'


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "click",
        "click()",
        "click(x)",
        "jump(3)",
        "type(3)",
        "type(3, hello)",
        'scroll("left")',
        "press()",
        "go_back(3)",
        "type(3, 5)",
        'click(3, "x", "y")',
        "stop(3)",
    ],
)
def test_bad_actions_raise_a_parse_error(bad: str) -> None:
    with pytest.raises(ActionParseError):
        parse_action(bad)


def test_constructor_checks() -> None:
    with pytest.raises(ActionParseError):
        Action("click")
    with pytest.raises(ActionParseError):
        Action("press", 3, "Enter")
    with pytest.raises(ActionParseError):
        Action("fly", 1)
