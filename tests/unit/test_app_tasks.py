"""The app task format (collectors.webapps.taskdef), the pruning rule of app pages
(collectors.webapps.prune) and the shop suite's registration, without a browser or the app."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from collectors.observation import Line, truncate_lines
from collectors.tasks import get_task, list_tasks, resolve_tasks
from collectors.webapps.oscar.data import catalogue
from collectors.webapps.oscar.hooks import draw_episode_product, draw_quantity
from collectors.webapps.prune import prune_lines
from collectors.webapps.runtime import Episode, check_declared, episode_code
from collectors.webapps.taskdef import AppTask, fill, load_tasks, normalise_answer
from core.spaces import Observation

DATA = {
    "products": [
        {"title": "Amber Kettle", "upc": "DW1", "price": "12.50", "url": "/catalogue/a_1/"},
        {"title": "Brisk Rake", "upc": "DW2", "price": "7.00", "url": "/catalogue/b_2/"},
    ]
}
ONE = {"products": DATA["products"][:1]}  # the draw of the check cases: Amber Kettle


def test_task_file_loads_and_fills(tmp_path) -> None:
    f = tmp_path / "tasks.json"
    f.write_text(
        json.dumps(
            {
                "app": "demo",
                "tasks": [
                    {
                        "name": "price",
                        "kind": "info",
                        "draw": {"product": "products"},
                        "instruction": 'Price of "{product.title}"?',
                        "check": {"answer": "{product.price}"},
                        "max_steps": 9,
                    }
                ],
            }
        )
    )
    (t,) = load_tasks(f)
    assert t.name == "demo/price" and t.kind == "info" and t.max_steps == 9
    p = t.params(3, DATA, "abc")
    assert p == t.params(3, DATA, "abc")  # the draw is seeded by (task, seed)
    assert {t.params(s, DATA, "abc")["product"]["upc"] for s in range(20)} == {"DW1", "DW2"}
    assert fill(t.instruction, p) == f'Price of "{p["product"]["title"]}"?'
    assert p["code"] == "abc"


def test_task_file_rejects_unknown_fields(tmp_path) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"app": "a", "tasks": [{"name": "x", "instruction": "i", "chek": {}}]}))
    with pytest.raises(ValueError, match="chek"):
        load_tasks(f)
    f.write_text(
        json.dumps({"app": "a", "tasks": [{"name": "x", "instruction": "i", "kind": "?"}]})
    )
    with pytest.raises(ValueError, match="kind"):
        load_tasks(f)


def test_answers_compare_loosely() -> None:
    assert normalise_answer(" $12.50 ") == normalise_answer("12.50")
    assert normalise_answer("Amber  Kettle") == normalise_answer("amber kettle")
    assert normalise_answer("12.5") != normalise_answer("12.50")


class _App:
    name = "fake"

    def __init__(self, state: dict):
        self.state = state

    async def control(self, request, action, body=None):
        assert action == "state"
        return self.state


class _Ctx:
    request = None


class _Page:
    def __init__(self, url: str):
        self.url = url


def _episode(task: AppTask, state: dict, url: str, tree: str = "") -> Episode:
    params = task.params(0, ONE, "c0de")
    ep = Episode(task, 0, "c0de", params, fill(task.instruction, params), _App(state), _Ctx(),
                 _Page(url), "http://127.0.0.1:1")  # fmt: skip
    ep.final = Observation("", url, tree)
    return ep


@pytest.mark.parametrize(
    "check,state,url,tree,ok",
    [
        ({"answer": "{product.price}"}, {"answer": "$12.50"}, "/", "", True),
        ({"answer": "{product.price}"}, {"answer": "12.00"}, "/", "", False),
        ({"url": "{product.url}"}, {}, "http://h/catalogue/a_1/?x=1", "", True),
        ({"url": "{product.url}"}, {}, "http://h/catalogue/b_2/", "", False),
        (
            {"basket": {"{product.upc}": 1}},
            {"basket": [{"upc": "DW1", "quantity": 1}]},
            "/",
            "",
            True,
        ),
        (
            {"basket": {"{product.upc}": 1}},
            {"basket": [{"upc": "DW1", "quantity": 2}]},
            "/",
            "",
            False,
        ),
        ({"page_contains": "{product.title}"}, {}, "/", 'heading "Amber Kettle"', True),
        ({"page_contains": "{product.title}"}, {}, "/", 'heading "Brisk Rake"', False),
    ],
)
def test_declared_checks_positive_and_negative(check, state, url, tree, ok) -> None:
    task = AppTask("demo/t", "fake", "i", draw={"product": "products"}, check=check)
    ep = _episode(task, state, url, tree)
    got, reason = asyncio.run(check_declared(ep, check))
    assert got is ok, reason


def test_episode_codes_differ_by_partition() -> None:
    a, b = episode_code("shop/x", 1, "p1"), episode_code("shop/x", 1, "p2")
    assert a != b and len(a) == 6 and a == episode_code("shop/x", 1, "p1")


def test_episode_product_is_named_by_the_code() -> None:
    p = draw_episode_product(random.Random(0), {}, "k3y9z0")
    assert p["product"]["upc"] == "EPk3y9z01" and p["product"]["title"].endswith(" k3y9z0")
    assert p["new_title"] != p["product"]["title"] and p["new_title"].endswith(" k3y9z0")


def test_a_drawn_quantity_never_exceeds_the_products_stock() -> None:
    # the shop keeps the old quantity when asked for more than its stock: such an episode
    # could not succeed (seeds 4 and 6 of shop/basket-quantity drew 3 of 2 and 4 of 3)
    data = catalogue(0)
    draws = [draw_quantity(random.Random(s), data, "x") for s in range(500)]
    assert all(2 <= d["quantity"] <= min(5, d["product"]["stock"]) for d in draws)
    assert {d["quantity"] for d in draws} == {2, 3, 4, 5}


def test_catalogue_is_seeded() -> None:
    a, b = catalogue(0), catalogue(1)
    assert a == catalogue(0) and a["products"] != b["products"]
    assert len({p["upc"] for p in a["products"]}) == len(a["products"])
    assert len({p["title"] for p in a["products"]}) == len(a["products"])
    for w in a["words"]:
        assert w["count"] == sum(p["title"].split()[0] == w["word"] for p in a["products"])


def test_prune_drops_repeated_picture_and_empty_containers() -> None:
    lines = [
        Line(0, 1, "generic", "", [], False),
        Line(1, None, "generic", "", [], False),  # empty container: dropped, children lifted
        Line(2, 2, "img", "Amber Kettle", [], True),  # the picture link: dropped
        Line(2, 3, "heading", "Amber Kettle", [], True),
        Line(2, None, "text", "US$12.50", [], False),
        Line(1, 4, "img", "Logo", [], True),  # a picture that repeats nothing: kept
        Line(1, 5, "link", "Basket", [], True),
    ]
    out = prune_lines(lines)
    # the generic root is not actionable: shown without its id, then a bare container, lifted
    assert [(ln.depth, ln.id, ln.role) for ln in out] == [
        (0, 3, "heading"),
        (0, None, "text"),
        (0, 4, "img"),
        (0, 5, "link"),
    ]
    text, info = truncate_lines(out, None)
    assert "Amber Kettle" in text and text.count("Amber Kettle") == 1


def test_shop_suite_is_registered_beside_miniwob() -> None:
    shop = list_tasks(suite="shop")
    assert len(shop) >= 20
    kinds = {t.app_task.kind for t in shop}
    assert kinds == {"info", "navigation", "search", "form", "flow", "admin"}
    assert sum(t.has_expert for t in shop) >= 0.8 * len(shop)
    assert get_task("shop/price-of").app_task.app == "shop"
    # MiniWoB's task patterns are unchanged by the app suites
    assert all(t.name.startswith("miniwob/") for t in resolve_tasks(["*experts*"]))
    assert all(t.name.startswith("shop/") for t in resolve_tasks(["shop/*"]))
    assert get_task("miniwob/click-button").app_task is None


def test_the_stack_starts_the_shop_only_when_asked(tmp_path) -> None:
    from core.config import load_config
    from infra.stack import ORDER, Stack

    cfg = load_config(env={}, overrides={"home": str(tmp_path)})
    stack = Stack(cfg)
    assert "shop" in ORDER and stack.services()["shop"].host == "127.0.0.1"
    assert not stack.wanted("shop", None) and stack.wanted("s3", None)
    assert stack.wanted("shop", ["shop"]) and not stack.wanted("s3", ["shop"])
    cfg.stack.shop = True
    assert stack.wanted("shop", None)
    argv = stack.services()["shop"].argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # binds loopback
    assert not any("password" in a for a in argv)  # credentials only in the 0600 file


def test_up_runs_the_app_suite_beside_miniwob_when_app_tasks_are_named(tmp_path) -> None:
    import json

    from core.config import load_config
    from infra.stack import Stack
    from infra.up import component_argv

    cfg = load_config(env={}, overrides={"home": str(tmp_path)})
    assert "collector-app" not in component_argv(cfg)
    cfg.up.app_tasks = ["shop/*"]
    assert Stack(cfg).wanted("shop", None)  # the shop starts with the stack for its tasks
    argv = component_argv(cfg)["collector-app"]
    assert argv[argv.index("--policy") + 1] == "expert"
    assert f"collector.tasks={json.dumps(['shop/*'])}" in argv
    cfg.up.app_tasks = ["miniwob/click-button"]
    assert not Stack(cfg).wanted("shop", None)
