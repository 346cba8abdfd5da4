"""The pruning rules of app pages (collectors.webapps.prune), the token budget they are cut to,
and that the observation then fits the models' prompts whole; the expert table's resume file."""

from __future__ import annotations

import json

from collectors.observation import Line, truncate_lines
from collectors.webapps.prune import prune_lines, token_measure
from core.config import Config
from core.spaces import Action, Observation
from models.lm.prompts import policy_prompt_ids, world_model_prompt_ids
from models.lm.tokenizer import build_tokenizer, decode


def shape(lines: list[Line]) -> list[tuple]:
    return [(ln.depth, ln.id, ln.role, ln.name) for ln in lines]


def test_closed_menu_items_are_dropped_and_an_open_one_kept() -> None:
    def menu(state: str) -> list[Line]:
        return [
            Line(0, 1, "listitem", "", [], False),
            Line(1, 2, "button", "Catalogue", [(state, None), ("haspopup", None)], True),
            Line(1, 3, "link", "Products", [], True),
            Line(1, 4, "link", "Categories", [], True),
            Line(2, 5, "img", "icon", [], True),  # inside an item: goes with it
            Line(0, 6, "link", "Reports", [], True),
        ]

    closed = prune_lines(menu("collapsed"))
    # the bare list item around the toggle is lifted too (rule 8)
    assert shape(closed) == [(0, 2, "button", "Catalogue"), (0, 6, "link", "Reports")]
    opened = prune_lines(menu("expanded"))
    assert [ln.id for ln in opened if ln.id] == [2, 3, 4, 5, 6]


def test_a_toggle_beside_other_content_hides_nothing() -> None:
    lines = [
        Line(0, 1, "generic", "", [], False),
        Line(1, 2, "button", "Browse store", [("collapsed", None), ("haspopup", None)], True),
        Line(1, 3, "textbox", "Search", [], True),  # not a menu item: the rule does not apply
        Line(1, 4, "button", "Search", [], True),
    ]
    assert [ln.id for ln in prune_lines(lines) if ln.id] == [2, 3, 4]
    # the toggle must be the first child
    lines2 = [
        Line(0, 1, "listitem", "", [], False),
        Line(1, 2, "link", "Home", [], True),
        Line(1, 3, "button", "More", [("collapsed", None), ("haspopup", None)], True),
        Line(1, 4, "link", "Help", [], True),
    ]
    assert [ln.id for ln in prune_lines(lines2) if ln.id] == [2, 3, 4]


def test_repeated_label_and_text_go_ids_stay_only_on_actionable_lines() -> None:
    lines = [
        Line(0, 1, "label", "UPC:", [], True),
        Line(0, 2, "textbox", "UPC:", [], True),
        Line(0, 3, "radio", "Make public", [], True),
        Line(0, 4, "label", "Make public", [], True),
        Line(0, 5, "label", "Remember me", [], True),  # names nothing beside it: kept
        Line(0, 6, "heading", "Delete product?", [], False),
        Line(0, 7, "heading", "Delete product?", [], False),  # printed twice: the second goes
        Line(0, 8, "text", "US$12.50", [], False),
        Line(0, 9, "cell", "7", [], False),
    ]
    out = prune_lines(lines)
    assert shape(out) == [
        (0, 2, "textbox", "UPC:"),
        (0, 3, "radio", "Make public"),
        (0, 5, "label", "Remember me"),
        (0, None, "heading", "Delete product?"),
        (0, None, "text", "US$12.50"),
        (0, None, "cell", "7"),
    ]
    text, _ = truncate_lines(out, None)
    assert "[6]" not in text and "[8]" not in text and "[2] textbox" in text


def card(depth: int, i: int, title: str, price: str) -> list[Line]:
    return [
        Line(depth, 100 + 10 * i, "listitem", "", [], False),
        Line(depth + 1, 101 + 10 * i, "img", title, [], True),
        Line(depth + 1, 102 + 10 * i, "heading", title, [], True),
        Line(depth + 1, 103 + 10 * i, "text", price, [], False),
        Line(depth + 1, 104 + 10 * i, "text", "In stock", [], False),
        Line(depth + 1, 105 + 10 * i, "button", "Add to basket", [], True),
    ]


def test_list_items_keep_what_differs_and_state_the_shared_text_once() -> None:
    lines = [Line(0, 1, "list", "", [], False)]
    for i, (t, p) in enumerate([("Amber Kettle", "US$12.50"), ("Brisk Rake", "US$7.00"),
                                ("Cedar Lamp", "US$9.99")]):  # fmt: skip
        lines += card(1, i, t, p)
    out = prune_lines(lines)
    text, _ = truncate_lines(out, None)
    assert text.count("In stock") == 1  # the first card's
    for t, p in [("Amber Kettle", "US$12.50"), ("Brisk Rake", "US$7.00")]:
        assert f'heading "{t}"' in text and p in text
    assert text.count('button "Add to basket"') == 3  # actionable lines are never merged
    assert "listitem" not in text  # bare wrappers lifted (rule 8); the heading starts a card
    # two items are not a list: nothing is merged
    two = [Line(0, 1, "list", "", [], False)] + card(1, 0, "A", "1") + card(1, 1, "B", "2")
    assert truncate_lines(prune_lines(two), None)[0].count("In stock") == 2


def test_table_rows_stay_whole() -> None:
    lines = [Line(0, 1, "table", "", [], False)]
    for r in range(4):
        base = 10 * (r + 1)
        lines += [
            Line(1, base, "row", "", [], False),
            Line(2, base + 1, "link", f"Product {r}", [], True),
            Line(2, base + 2, "cell", "Goods", [], False),  # same in every row: kept (positional)
            Line(2, base + 3, "cell", "", [], False),
            Line(3, base + 4, "button", "Actions", [("collapsed", None), ("haspopup", None)], True),
        ]
    out = prune_lines(lines)
    # the bare table line and the empty cells are lifted, every row stays with its cells
    assert shape(out)[:4] == [
        (0, None, "row", ""),
        (1, 11, "link", "Product 0"),
        (1, None, "cell", "Goods"),  # the same in every row: kept (cells are read by position)
        (1, 14, "button", "Actions"),
    ]
    assert [ln.role for ln in out].count("row") == 4
    assert [ln.name for ln in out].count("Goods") == 4


def test_every_actionable_element_survives_but_pictures_and_closed_menu_items() -> None:
    lines = [Line(0, 1, "generic", "", [], False)]
    for i in range(12):
        lines += card(1, i, f"Product {i}", f"US${i}.00")
    lines += [
        Line(1, 500, "listitem", "", [], False),
        Line(2, 501, "button", "Menu", [("collapsed", None), ("haspopup", None)], True),
        Line(2, 502, "link", "Hidden item", [], True),
        Line(1, 503, "textbox", "Search", [("value", "x")], True),
    ]
    out = prune_lines(lines)
    kept = {ln.id for ln in out if ln.id is not None}
    lost = {ln.id for ln in lines if ln.actionable} - kept
    assert lost == {101 + 10 * i for i in range(12)} | {502}
    assert all(ln.actionable for ln in out if ln.id is not None)


def listing_page(n: int) -> list[Line]:
    """A long shop page: a header, a category menu and ``n`` product cards."""
    lines = [
        Line(0, 1, "generic", "", [], False),
        Line(1, 2, "link", "Answer the question", [], True),
    ]
    lines += [Line(1, 3 + k, "link", f"Category {k}", [], True) for k in range(8)]
    lines.append(Line(1, 20, "combobox", "Sort by", [("value", "Relevancy")], True))
    lines += [Line(2, None, "option", o, [], False) for o in ("Relevancy", "Newest", "Price")]
    for i in range(n):
        lines += card(1, i, f"Velvet Headphones {i}", f"US${100 + i}.95")
    return lines


def test_the_observation_fits_the_models_prompts_whole() -> None:
    cfg = Config()
    budget = cfg.collector.app_obs_tokens
    measure = token_measure(cfg.model.tokenizer)
    tok = build_tokenizer(cfg.model.tokenizer)
    tree, info = truncate_lines(prune_lines(listing_page(60)), budget, measure)
    assert info["truncated"] and 0.9 * budget < measure(tree) <= budget
    # the shop suite's longest instruction (52 tokens) and a history of four long actions: the
    # prompts beside the tree were at most 121 (policy) and 85 (world model) tokens on the suite
    # (evaluation.bench.app_obs's episodes), below what max_positions leaves the tree
    instr = (
        "Register a new account with the e-mail ben.hale.zfh5cz@example.com and the password "
        "Shop-Cedar-7008."
    )
    obs = Observation(instruction=instr, url="/catalogue/", tree=tree, focused=20)
    history = [Action.type(144, "Hazel Night Light 9kz4t0").to_text(), "click(187)"] * 2
    p = decode(tok, policy_prompt_ids(tok, obs, history, cfg.model.max_positions))
    w = decode(
        tok,
        world_model_prompt_ids(
            tok, obs, history[0], cfg.model.max_positions, cfg.dream.max_change_tokens
        ),
    )
    for prompt in (p, w):
        assert tree in prompt and instr in prompt
    assert "lines omitted" not in p + w


def test_miniwob_budget_is_still_bytes_and_app_budget_tokens() -> None:
    lines = listing_page(30)
    byte_tree, _ = truncate_lines(lines, 512)  # MiniWoB's: UTF-8 bytes, no pruning
    assert len(byte_tree.encode()) <= 512
    m = token_measure("bpe")
    tok_tree, _ = truncate_lines(prune_lines(lines), 512, m)
    assert m(tok_tree) <= 512 < len(tok_tree.encode())
    assert token_measure("byte")("añb") == 4


def test_expert_table_resumes_from_its_episode_file(tmp_path) -> None:
    from evaluation.expert_table import read_episodes

    f = tmp_path / "episodes.jsonl"
    rows = [
        {"task": "shop/a", "seed": 0, "reward": 1.0, "steps": 3},
        {"task": "shop/a", "seed": 1, "reward": 0.0, "steps": 9},
        {"task": "shop/a", "seed": 1, "reward": 1.0, "steps": 4},  # a rerun: the last one counts
        {"task": "shop/b", "seed": 0, "reward": 1.0, "steps": 2},  # not asked for
        {"task": "shop/a", "seed": 7, "reward": 1.0, "steps": 2},  # outside the seeds
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"task": "shop/a", "se')
    results: dict = {"shop/a": []}
    done = read_episodes(str(f), results, [0, 1, 2])
    assert done == {("shop/a", 0), ("shop/a", 1)}
    assert sorted((r["seed"], r["reward"]) for r in results["shop/a"]) == [(0, 1.0), (1, 1.0)]
    assert read_episodes(str(tmp_path / "none.jsonl"), {"shop/a": []}, [0]) == set()
