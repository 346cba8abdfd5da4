import random

import pytest

from models.world_model.change import (
    ChangeError,
    apply_change,
    change_f1,
    diff_to_change,
    format_output,
    parse_model_output,
)

A = '[1] heading "Login"\n[2] textbox "Username"\n[3] textbox "Password"\n[4] button "Submit"'


def test_same():
    assert diff_to_change(A, A) == "why: nothing changes\nsame"
    assert apply_change(A, "why: x\nsame") == A
    assert apply_change(A, "") == A


def test_replace():
    b = A.replace('[2] textbox "Username"', '[2] textbox "Username" value="kiera"')
    ch = diff_to_change(A, b)
    assert (
        ch == 'why: 1 changed, 0 added, 0 removed\nreplace [2] [2] textbox "Username" value="kiera"'
    )
    assert apply_change(A, ch) == b


def test_lines_without_id_are_addressed_by_offset():
    a = (
        'text "Pick a colour"\n[1] heading "Form"\n[5] combobox value="A"\n  option "A" selected\n'
        '  option "B"\n[6] button "Submit"\n[7] link "Help"\n[8] link "Terms"'
    )
    b = (
        a.replace('value="A"', 'value="B"')
        .replace('option "A" selected', 'option "A"')
        .replace('  option "B"', '  option "B" selected')
        .replace('text "Pick a colour"', 'text "Thanks"')
    )
    ch = diff_to_change(a, b)
    assert 'replace [0]+1 text "Thanks"' in ch
    assert 'replace [5] [5] combobox value="B"' in ch
    assert 'replace [5]+1   option "A"' in ch and 'replace [5]+2   option "B" selected' in ch
    assert apply_change(a, ch) == b
    with pytest.raises(ChangeError):
        apply_change(a, "remove [5]+3")  # would cross [6]
    with pytest.raises(ChangeError):
        apply_change(a, "remove [8]+1")  # past the end


def test_insert_takes_next_free_id():
    b = A + '\n  [5] text "Wrong password"'
    ch = diff_to_change(A, b)
    assert ch.endswith('insert after [4]   [+] text "Wrong password"')
    assert apply_change(A, ch) == b
    # next_id from the environment moves the free id on
    b9 = A + '\n[9] text "x"'
    ch9 = diff_to_change(A, b9, next_id=9)
    assert ch9.endswith('insert after [4] [+] text "x"')
    assert apply_change(A, ch9, next_id=9) == b9
    assert apply_change(A, ch9) != b9  # without next_id it would be [5]


def test_remove_and_insert_before():
    a = A + "".join(f'\n[{i}] link "Item number {i}"' for i in range(5, 9))
    b = '[17] text "Welcome"\n' + a.replace('[2] textbox "Username"\n', "").replace(
        '[3] textbox "Password"\n', ""
    )
    ch = diff_to_change(a, b)
    assert "remove [2]" in ch and "remove [3]" in ch
    assert 'insert before [1] [17] text "Welcome"' in ch
    assert apply_change(a, ch) == b
    # [+] when the next free id is the right one
    b2 = '[9] text "Welcome"\n' + a
    assert 'insert before [1] [+] text "Welcome"' in diff_to_change(a, b2)


def test_page_for_navigation_and_empty():
    b = '[10] heading "Done"\n[11] link "Back"'
    ch = diff_to_change(A, b)
    assert ch.startswith("why: navigates to a new page\npage\n")
    assert apply_change(A, ch) == b
    for a2, b2 in (("", b), (A, ""), ("", ""), ("x", "y"), ("\n", "")):
        assert apply_change(a2, diff_to_change(a2, b2)) == b2


def test_page_escapes_trailer_like_lines():
    b = "reward 1\ndone 1\n\\x"
    ch = diff_to_change(A, b)
    assert apply_change(A, ch) == b
    out = format_output(ch, 1.0, True)
    change, r, d, ok, why = parse_model_output(out)
    assert ok and r == 1.0 and d is True
    assert apply_change(A, change) == b


def test_apply_bad_anchor_raises():
    with pytest.raises(ChangeError):
        apply_change(A, "remove [99]")


def test_parse_clean_output():
    b = A.replace("Submit", "Sent")
    text = format_output(diff_to_change(A, b), 0.5, False)
    assert text.endswith("reward 0.5\ndone 0")
    change, r, d, ok, reason = parse_model_output(text, tree=A)
    assert ok and reason == "" and r == 0.5 and d is False
    assert apply_change(A, change) == b


def test_parse_repairs_bad_ops():
    text = "why: junk\nremove [2]\nfrobnicate [3]\nremove [99]\nreward 1\ndone 1"
    change, r, d, ok, reason = parse_model_output(text, tree=A)
    assert ok and r == 1.0 and d is True
    assert "unknown op" in reason and "[99]" in reason
    assert change == "why: junk\nremove [2]"
    assert apply_change(A, change) == A.replace('[2] textbox "Username"\n', "")


def test_parse_rejects():
    for text in (
        "",
        "why: x\nremove [2]",
        "garbage",
        "why: x\nreward nan\ndone 0",
        "why: x\nremove [99]\nreward 0\ndone 0",
    ):
        change, r, d, ok, reason = parse_model_output(text, tree=A)
        assert not ok and reason and change.endswith("same") and r == 0.0 and d is False
    change, r, d, ok, reason = parse_model_output(None)  # type: ignore[arg-type]
    assert not ok


def test_parse_missing_why_and_order():
    change, r, d, ok, reason = parse_model_output("same\ndone 1\nreward 0", tree=A)
    assert ok and d is True and "why" in reason


def test_f1():
    b = A.replace("Submit", "Sent")
    assert change_f1(A, b, b) == 1.0
    assert change_f1(A, A, A) == 1.0
    assert change_f1(A, A, b) == 0.0
    c = b.replace("Login", "Log in")
    assert 0 < change_f1(A, b, c) < 1


# --- property-style round trips ------------------------------------------------

ROLES = ["button", "link", "textbox", "text", "checkbox", "option"]


def random_tree(rng: random.Random, ids: list[int]) -> list[str]:
    lines = []
    for i in ids:
        depth = rng.randint(0, 2)
        name = rng.choice(["Submit", "OK", "a b", "", "reward 1", '"q"', "é"])
        lines.append("  " * depth + f'[{i}] {rng.choice(ROLES)} "{name}"')
    return lines


def mutate(rng: random.Random, lines: list[str], free: int) -> list[str]:
    out = list(lines)
    for _ in range(rng.randint(0, 4)):
        op = rng.random()
        if op < 0.25 and out:
            del out[rng.randrange(len(out))]
        elif op < 0.5 and out:
            k = rng.randrange(len(out))
            out[k] = out[k] + " changed"
        elif op < 0.8:
            out.insert(rng.randint(0, len(out)), f'[{free}] text "new {free}"')
            free += rng.choice([1, 1, 3])
        else:
            junk = rng.choice(
                [
                    "",
                    "no id line",
                    '  option "B"',
                    "reward 0",
                    "done 1",
                    "\\esc",
                    "page",
                    "same",
                    "[+] x",
                    'text "loose"',
                ]
            )
            out.insert(rng.randint(0, len(out)), junk)
    return out


@pytest.mark.parametrize("seed", range(400))
def test_random_round_trip(seed):
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1, 40), rng.randint(0, 8)))
    a = random_tree(rng, ids)
    for _ in range(rng.choice([0, 0, 1, 3])):
        a.insert(rng.randint(0, len(a)), rng.choice(["orphan text", '  option "A" selected', ""]))
    b = (
        mutate(rng, a, max(ids, default=0) + 1)
        if rng.random() < 0.8
        else random_tree(rng, [50, 51])
    )
    if rng.random() < 0.1:
        b = rng.sample(a, len(a))  # shuffled (duplicate ids possible after mutate)
    ta, tb = "\n".join(a), "\n".join(b)
    ch = diff_to_change(ta, tb)
    assert apply_change(ta, ch) == tb
    reward, done = rng.choice([0.0, 1.0, -0.25]), rng.random() < 0.5
    change, r, d, ok, reason = parse_model_output(format_output(ch, reward, done), tree=ta)
    assert ok, reason
    assert (r, d) == (reward, done)
    assert apply_change(ta, change) == tb


def test_random_strings_never_raise():
    rng = random.Random(0)
    alphabet = [
        "remove [",
        "replace [",
        "insert after [",
        "page",
        "reward ",
        "done ",
        "1",
        "]",
        " ",
        "\n",
        "x",
        "why:",
        "+",
        "[+]",
        "0",
    ]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        change, r, d, ok, reason = parse_model_output(text, tree=A)
        if ok:
            apply_change(A, change)  # a usable change always applies
