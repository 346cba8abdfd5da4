"""The shop tasks' Python draws, resets and checks (named in ``tasks.yaml`` as
``collectors.webapps.oscar.hooks:<function>``).  Draws are plain functions of
``(rng, data, code)``; resets and checks take the ``collectors.webapps.runtime.Episode`` and
call the shop's control API (``collectors.webapps.oscar.control``)."""

from __future__ import annotations

from collectors.webapps.oscar.data import ADJECTIVES, CATEGORIES, FIRST, LAST, NOUNS

SALES = ["Spring Sale", "Gift Ideas", "Clearance", "New Arrivals", "Best Sellers", "Eco Range"]


def _title(rng, code: str) -> str:
    cat = rng.choice(CATEGORIES)
    return f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS[cat])} {code}"


# --- draws ----------------------------------------------------------------------------------


def draw_two_products(rng, data, code) -> dict:
    a, b = rng.sample(data["products"], 2)
    return {"a": a, "b": b}


def draw_quantity(rng, data, code) -> dict:
    """A product and 2-5 units of it, never more than its stock: the shop refuses a quantity
    above stock (the basket keeps the old one), which made such an episode impossible."""
    product = rng.choice(data["products"])
    return {"product": product, "quantity": rng.randint(2, min(5, int(product["stock"])))}


def draw_cheapest(rng, data, code) -> dict:
    cat = rng.choice(data["nonempty_categories"])
    items = [p for p in data["products"] if p["category"] == cat["name"]]
    cheapest = min(items, key=lambda p: float(p["price"]))
    return {"category": cat, "cheapest": cheapest}


def draw_episode_product(rng, data, code) -> dict:
    """A product made for this episode (UPC ``EP<code>1``) and a new title for it."""
    old = _title(rng, code)
    new = old
    while new == old:
        new = _title(rng, code)
    product = {
        "title": old,
        "upc": f"EP{code}1",
        "category": rng.choice(CATEGORIES),
        "price": f"{rng.randint(3, 199)}.99",
        "stock": rng.randint(2, 40),
    }
    return {"product": product, "new_title": new}


def draw_new_category(rng, data, code) -> dict:
    return {"name": f"{rng.choice(SALES)} {code}"}


def draw_new_user(rng, data, code) -> dict:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    digits = "".join(rng.choice("0123456789") for _ in range(4))
    return {
        "email": f"{first.lower()}.{last.lower()}.{code}@example.com",
        "password": f"Shop-{rng.choice(ADJECTIVES)}-{digits}",
        "first_name": first,
        "new_first_name": rng.choice([f for f in FIRST if f != first]),
    }


# --- resets ---------------------------------------------------------------------------------


async def reset_cleanup(ep) -> None:
    """Remove what an earlier episode of this code made (a user, a category)."""
    await ep.control("cleanup", {"code": ep.code})


async def reset_episode_product(ep) -> None:
    await ep.control("episode", {"code": ep.code, "products": [ep.params["product"]]})


async def reset_user(ep) -> None:
    """The episode's customer, with the drawn password (for the login task)."""
    p = ep.params
    user = {"email": p["email"], "password": p["password"], "first_name": p["first_name"]}
    await ep.control("episode", {"code": ep.code, "users": [user]})


async def reset_logged_in_user(ep) -> None:
    """The episode's customer, logged in (for the profile task)."""
    await reset_user(ep)
    await ep.control("login", {"email": ep.params["email"]})


async def reset_two_in_basket(ep) -> None:
    lines = {ep.params["a"]["upc"]: 1, ep.params["b"]["upc"]: 1}
    await ep.control("basket_add", {"lines": lines})


# --- checks ---------------------------------------------------------------------------------


async def check_renamed(ep) -> tuple[bool, str]:
    r = await ep.control("product", {"upc": ep.params["product"]["upc"]})
    if not r["exists"]:
        return False, "the product no longer exists"
    want = ep.params["new_title"]
    ok = r["title"] == want
    return ok, "success" if ok else f"title {r['title']!r}, expected {want!r}"


async def check_deleted(ep) -> tuple[bool, str]:
    r = await ep.control("product", {"upc": ep.params["product"]["upc"]})
    if r["exists"]:
        return False, "the product still exists"
    other = await ep.control("catalogue", {})
    if len(other["products"]) != len((await ep.app.data(ep.request))["products"]):
        return False, "a seeded product was deleted too"
    return True, "success"


async def check_category_created(ep) -> tuple[bool, str]:
    r = await ep.control("category", {"name": ep.params["name"]})
    # judged: the category goes (it would lengthen every shop page of later episodes)
    await ep.control("cleanup", {"code": ep.code})
    return r["exists"], "success" if r["exists"] else f"no category {ep.params['name']!r}"


async def check_registered(ep) -> tuple[bool, str]:
    r = await ep.control("user", {"email": ep.params["email"]})
    return r["exists"], "success" if r["exists"] else f"no account {ep.params['email']!r}"


async def check_logged_in(ep) -> tuple[bool, str]:
    user = (await ep.state())["user"]
    ok = user is not None and user["email"] == ep.params["email"]
    return ok, "success" if ok else f"logged in as {user and user['email']!r}"


async def check_first_name(ep) -> tuple[bool, str]:
    r = await ep.control("user", {"email": ep.params["email"]})
    want = ep.params["new_first_name"]
    ok = r.get("first_name") == want
    return ok, "success" if ok else f"first name {r.get('first_name')!r}, expected {want!r}"
