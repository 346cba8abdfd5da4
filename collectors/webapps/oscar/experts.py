"""Scripted experts of the shop tasks.  Like MiniWoB's (``collectors.experts``) they read only
the observation (instruction, URL, text tree) and the episode's history, never the page or the
app, so they work on dreamed pages too.  Each task's expert is a small plan: reach a page
(search, a link), read or change something there, then submit an answer or stop."""

from __future__ import annotations

import re

from collectors.experts.base import Expert, fill_then, quoted
from core.pagetree import Node, find, first, parse_tree
from core.spaces import Action, Observation

SEARCH_TOGGLE = 1  # the second "Toggle navigation" button opens the primary nav (search form)


def _path(obs: Observation) -> str:
    return (obs.url or "").split("#")[0].split("?")[0]


def named(nodes: list[Node], name: str, roles=None) -> Node | None:
    """The first node of ``roles`` named ``name`` that has an id (one to act on), else the first
    without (app pages show non-actionable lines without ids: a heading read, not clicked)."""
    return first(nodes, role=roles, name=name) or first(nodes, role=roles, name=name, with_id=False)


def on_product(nodes: list[Node], title: str) -> bool:
    return named(nodes, title, ("heading",)) is not None and (
        named(nodes, "Write a review", ("link",)) is not None
    )


def cell_after(nodes: list[Node], header: str) -> str | None:
    for n in nodes:
        if n.role == "columnheader" and n.name == header:
            nxt = nodes[n.index + 1] if n.index + 1 < len(nodes) else None
            return nxt.name if nxt is not None and nxt.role == "cell" else None
    return None


def money(text: str | None) -> str | None:
    m = re.search(r"(\d+(?:\.\d+)?)", (text or "").replace(",", ""))
    return m.group(1) if m else None


def search_for(nodes: list[Node], text: str) -> Action:
    """Type ``text`` into the search box and submit it (the nav is opened first if collapsed)."""
    box = first(nodes, role=("textbox", "searchbox"), name="Search")
    if box is None:
        toggles = find(nodes, role="button", name="Toggle navigation")
        return Action.click(toggles[min(SEARCH_TOGGLE, len(toggles) - 1)].id)
    if box.value != text:
        return Action.type(box.id, text)
    btn = named(nodes, "Search", ("button",))
    return Action.click(btn.id) if btn else Action.press("Enter")


def goto_product(nodes: list[Node], obs: Observation, title: str) -> Action | None:
    """The next step towards the product page of ``title``; None when on it."""
    if on_product(nodes, title):
        return None
    hit = named(nodes, title, ("heading", "link"))
    if hit is not None:
        return Action.click(hit.id)
    return search_for(nodes, title)


def answer(nodes: list[Node], obs: Observation, text: str) -> Action:
    """Submit ``text`` on the answer page, then stop."""
    if named(nodes, f"Recorded answer: {text}", ("text", "generic", "paragraph")) or any(
        n.name == f"Recorded answer: {text}" for n in nodes
    ):
        return Action.stop()
    if not _path(obs).startswith("/answer/"):
        return Action.click(named(nodes, "Answer the question", ("link",)).id)
    box = first(nodes, role="textbox", name="Your answer")
    if box is None:  # the page is still loading
        return None
    if box.value != text:
        return Action.type(box.id, text)
    return Action.click(named(nodes, "Submit answer", ("button",)).id)


def recall(history: list, obs: Observation, read) -> str | None:
    """The first value ``read(nodes, obs)`` finds, newest observation first."""
    for o in [obs] + [h[0] for h in reversed(history)]:
        v = read(parse_tree(o.tree), o)
        if v is not None:
            return v
    return None


def clicked(history: list, name: str, where=None) -> bool:
    """Whether an earlier step clicked an element named ``name`` (on a page where
    ``where(nodes, obs)`` held)."""
    for o, a in history:
        if getattr(a, "kind", "") != "click":
            continue
        nodes = parse_tree(o.tree)
        n = next((x for x in nodes if x.id == a.element), None)
        if n is not None and n.name == name and (where is None or where(nodes, o)):
            return True
    return False


def submitted(history: list, obs: Observation, name: str, where=None) -> bool | None:
    """After clicking ``name`` (a form's submit button): True once the page has moved on (the
    URL differs from the one the click was made on), None while it has not (wait for the POST
    to finish before stopping, or the check runs before the app saved), False before the click."""
    for o, a in reversed(history):
        if getattr(a, "kind", "") != "click":
            continue
        nodes = parse_tree(o.tree)
        n = next((x for x in nodes if x.id == a.element), None)
        if n is not None and n.name == name and (where is None or where(nodes, o)):
            return True if obs.url != o.url else None
    return False


def _stop_after(history, obs, name, where=None) -> Action | None | bool:
    """``stop`` once the submit went through; None (wait) while it is on its way; False before."""
    done = submitted(history, obs, name, where)
    if done is None:
        return None
    return Action.stop() if done else False


class ShopExpert(Expert):
    max_waits = 4
    wait_s = 0.3

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn

    def decide(self, instr, nodes, obs, history):
        try:
            return self.fn(instr, nodes, obs, history)
        except (AttributeError, IndexError, StopIteration):
            # an element the plan needs is not on the page (yet): the observation came before a
            # navigation finished; wait and read the next one (``Expert.act``: WAIT, then stop)
            return None


# --- information seeking ---------------------------------------------------------------------


def _product_fact(read):
    def expert(instr, nodes, obs, history):
        title = quoted(instr)[0]

        def fact(ns, o):
            return read(ns, title) if on_product(ns, title) else None

        value = recall(history, obs, fact)
        if value is None:
            return goto_product(nodes, obs, title)
        return answer(nodes, obs, value)

    return expert


def _breadcrumb_category(nodes, title):
    """The product page's breadcrumb: Home > category > the product (a listitem)."""
    for n in nodes:
        if n.role == "listitem" and n.name == title and n.index > 0:
            prev = nodes[n.index - 1]
            return prev.name if prev.role == "link" else None
    return None


price_of = _product_fact(lambda ns, t: money(cell_after(ns, "Price (incl. tax)")))
stock_of = _product_fact(lambda ns, t: money(cell_after(ns, "Availability")))
upc_of = _product_fact(lambda ns, t: cell_after(ns, "UPC"))
category_of = _product_fact(_breadcrumb_category)


def _on_category(nodes, obs, name) -> bool:
    return "/category/" in _path(obs) and named(nodes, name, ("heading",)) is not None


def _listing(nodes) -> list[tuple[str, str]]:
    """(title, price) of the product cards on a listing page."""
    out = []
    for n in nodes:
        if n.role == "heading" and n.id is not None:
            nxt = nodes[n.index + 1] if n.index + 1 < len(nodes) else None
            if nxt is not None and nxt.role == "text" and nxt.name.startswith("US$"):
                out.append((n.name, money(nxt.name)))
    return out


def _goto_category(nodes, obs, name) -> Action | None:
    if _on_category(nodes, obs, name):
        return None
    link = named(nodes, name, ("link",))
    if link is not None:
        return Action.click(link.id)
    return Action.click(named(nodes, "DynaShop", ("link",)).id)


def category_count(instr, nodes, obs, history):
    cat = quoted(instr)[0]
    value = recall(
        history,
        obs,
        lambda ns, o: (
            str(len(find(ns, role="button", name="Add to basket")))
            if _on_category(ns, o, cat)
            else None
        ),
    )
    if value is None:
        return _goto_category(nodes, obs, cat)
    return answer(nodes, obs, value)


def cheapest_in_category(instr, nodes, obs, history):
    cat = quoted(instr)[0]

    def read(ns, o):
        if not _on_category(ns, o, cat):
            return None
        items = _listing(ns)
        return min(items, key=lambda t: float(t[1]))[0] if items else None

    value = recall(history, obs, read)
    if value is None:
        return _goto_category(nodes, obs, cat)
    return answer(nodes, obs, value)


def search_count(instr, nodes, obs, history):
    word = quoted(instr)[0]

    def read(ns, o):
        if _path(o).startswith("/search/") and named(
            ns, f'Products matching "{word}"', ("heading",)
        ):
            return str(len(_listing(ns)))
        return None

    value = recall(history, obs, read)
    if value is None:
        return search_for(nodes, word)
    return answer(nodes, obs, value)


# --- navigation and search -------------------------------------------------------------------


def open_product(instr, nodes, obs, history):
    return goto_product(nodes, obs, quoted(instr)[0]) or Action.stop()


def open_category(instr, nodes, obs, history):
    return _goto_category(nodes, obs, quoted(instr)[0]) or Action.stop()


def basket_link(nodes: list[Node]) -> Node | None:
    """The header's basket link ("Basket", or "Basket Total: US$..." when it holds items)."""
    return next((n for n in find(nodes, role="link") if n.name.startswith("Basket")), None)


def open_basket(instr, nodes, obs, history):
    if _path(obs) == "/basket/":
        return Action.stop()
    return Action.click(basket_link(nodes).id)


def open_review_form(instr, nodes, obs, history):
    if _path(obs).endswith("/reviews/add/"):
        return Action.stop()
    title = quoted(instr)[0]
    step = goto_product(nodes, obs, title)
    return step or Action.click(named(nodes, "Write a review", ("link",)).id)


def search_product(instr, nodes, obs, history):
    title = quoted(instr)[0]
    if _path(obs).startswith("/search/") and named(
        nodes, f'Products matching "{title}"', ("heading",)
    ):
        return Action.stop()
    return search_for(nodes, title)


# --- forms ----------------------------------------------------------------------------------


def _credentials(instr: str) -> tuple[str, str]:
    email = re.search(r"(\S+@\S+?)(?:\s|$)", instr).group(1)
    pw = re.search(r"password (\S+?)\.?$", instr).group(1)
    return email, pw


def _goto_login(nodes, obs) -> Action | None:
    if _path(obs).startswith("/accounts/login/"):
        return None
    link = named(nodes, "Login or register", ("link",))
    if link is not None:
        return Action.click(link.id)
    return Action.click(find(nodes, role="button", name="Toggle navigation")[0].id)


def login(instr, nodes, obs, history):
    end = _stop_after(history, obs, "Log In")
    if end is not False:
        return end
    step = _goto_login(nodes, obs)
    if step is not None:
        return step
    email, pw = _credentials(instr)
    emails = find(nodes, role="textbox", name="Email address")
    pws = find(nodes, role="textbox", name="Password")
    return fill_then(
        nodes,
        [(emails[0], email), (pws[0], pw)],
        Action.click(named(nodes, "Log In", ("button",)).id),
    )


def register(instr, nodes, obs, history):
    end = _stop_after(history, obs, "Register")
    if end is not False:
        return end
    step = _goto_login(nodes, obs)
    if step is not None:
        return step
    email, pw = _credentials(instr)
    emails = find(nodes, role="textbox", name="Email address")
    pws = find(nodes, role="textbox", name="Password")
    confirm = named(nodes, "Confirm password", ("textbox",))
    return fill_then(
        nodes,
        [(emails[-1], email), (pws[-1], pw), (confirm, pw)],
        Action.click(named(nodes, "Register", ("button",)).id),
    )


def change_first_name(instr, nodes, obs, history):
    end = _stop_after(history, obs, "Save")
    if end is not False:
        return end
    name = re.search(r"profile to (\S+?)\.?$", instr).group(1)
    box = named(nodes, "First name", ("textbox",))
    if box is None:
        return Action.click(named(nodes, "Edit profile", ("link", "button")).id)
    return fill_then(nodes, [(box, name)], Action.click(named(nodes, "Save", ("button",)).id))


# --- the basket ----------------------------------------------------------------------------


def _added(history, title) -> bool:
    return clicked(history, "Add to basket", lambda ns, o: on_product(ns, title))


def _add(nodes, obs, history, title) -> Action | None:
    """The next step of adding ``title`` to the basket from its page; None once done."""
    if _added(history, title):
        return None
    return goto_product(nodes, obs, title) or Action.click(
        named(nodes, "Add to basket", ("button",)).id
    )


def add_to_basket(instr, nodes, obs, history):
    return _add(nodes, obs, history, quoted(instr)[0]) or Action.stop()


def add_two_to_basket(instr, nodes, obs, history):
    a, b = quoted(instr)[:2]
    return _add(nodes, obs, history, a) or _add(nodes, obs, history, b) or Action.stop()


def _basket_line(nodes, title) -> list[Node]:
    """The basket page's line of ``title``: its heading up to its "Remove" link (the quantity
    box and "Update" between)."""
    h = named(nodes, title, ("heading",))
    if h is None:
        return []
    out = []
    for n in nodes[h.index :]:
        out.append(n)
        if n.name == "Remove":
            return out
    return []


def basket_quantity(instr, nodes, obs, history):
    title = quoted(instr)[0]
    qty = re.search(r"Put (\d+) units", instr).group(1)
    step = _add(nodes, obs, history, title)
    if step is not None:
        return step
    if _path(obs) != "/basket/":
        return Action.click(basket_link(nodes).id)
    line = _basket_line(nodes, title)
    box = next((n for n in line if n.role == "spinbutton"), None)
    if box is None:
        return None
    if box.value != qty:
        return Action.type(box.id, qty)
    if clicked(history, "Update", lambda ns, o: _path(o) == "/basket/"):
        return Action.stop()
    update = next((n for n in line if n.name == "Update"), None)
    return Action.click(update.id) if update else None


def remove_from_basket(instr, nodes, obs, history):
    title = quoted(instr)[0]
    if _path(obs) != "/basket/":
        return Action.click(basket_link(nodes).id)
    if named(nodes, title, ("heading",)) is None:
        return Action.stop()
    line = _basket_line(nodes, title)
    return Action.click(line[-1].id) if line else None


# --- the dashboard ---------------------------------------------------------------------------


def _dashboard_find(nodes, obs, field: str, value: str, title: str | None) -> Action | None:
    """Search the dashboard's product list by ``field`` ("UPC:" / "Product title:"); None when
    the result row (the link ``title``, if given) is on the page."""
    box = named(nodes, field, ("textbox",))
    if box is None:
        return None
    if box.value != value:
        return Action.type(box.id, value)
    rows = [n for n in find(nodes, role="link") if title is None or n.name == title]
    if "?" in (obs.url or "") and rows:
        return None
    return Action.click(named(nodes, "Search", ("button",)).id)


def admin_find_upc(instr, nodes, obs, history):
    upc = re.search(r"UPC (\S+?)\.", instr).group(1)

    def read(ns, o):
        if "upc=" not in (o.url or ""):
            return None
        for n in ns:
            if n.role == "cell" and n.name == upc:
                prev = ns[n.index - 1]
                return prev.name if prev.role == "link" else None
        return None

    value = recall(history, obs, read)
    if value is None:
        return _dashboard_find(nodes, obs, "UPC:", upc, None) or Action.stop()
    return answer(nodes, obs, value)


def admin_rename_product(instr, nodes, obs, history):
    old, new = quoted(instr)[:2]
    end = _stop_after(history, obs, "Save")
    if end is not False:
        return end
    title = named(nodes, "Title", ("textbox",))
    if title is not None and "/products/" in _path(obs):
        return fill_then(nodes, [(title, new)], Action.click(named(nodes, "Save", ("button",)).id))
    step = _dashboard_find(nodes, obs, "Product title:", old, old)
    return step or Action.click(named(nodes, old, ("link",)).id)


def admin_delete_product(instr, nodes, obs, history):
    title = quoted(instr)[0]
    end = _stop_after(history, obs, "Delete", lambda ns, o: _path(o).endswith("/delete/"))
    if end is not False:
        return end
    if _path(obs).endswith("/delete/"):
        return Action.click(named(nodes, "Delete", ("button",)).id)
    step = _dashboard_find(nodes, obs, "Product title:", title, title)
    if step is not None:
        return step
    delete = named(nodes, "Delete", ("link", "menuitem", "button"))
    if delete is not None:
        return Action.click(delete.id)
    link = named(nodes, title, ("link",))
    actions = next((n for n in nodes[link.index :] if n.name == "Actions"), None)
    return Action.click(actions.id)


def admin_create_category(instr, nodes, obs, history):
    name = quoted(instr)[0]
    end = _stop_after(history, obs, "Save")
    if end is not False:
        return end
    box = named(nodes, "Name", ("textbox",))
    if box is None:
        link = next(
            (n for n in find(nodes, role=("link", "button")) if "new category" in n.name.lower()),
            None,
        )
        return Action.click(link.id)
    return fill_then(nodes, [(box, name)], Action.click(named(nodes, "Save", ("button",)).id))


EXPERTS: dict = {}
for _name, _fn in {
    "price-of": price_of,
    "stock-of": stock_of,
    "upc-of": upc_of,
    "category-of": category_of,
    "category-count": category_count,
    "cheapest-in-category": cheapest_in_category,
    "search-count": search_count,
    "open-product": open_product,
    "open-category": open_category,
    "open-basket": open_basket,
    "open-review-form": open_review_form,
    "search-product": search_product,
    "login": login,
    "register": register,
    "change-first-name": change_first_name,
    "add-to-basket": add_to_basket,
    "add-two-to-basket": add_two_to_basket,
    "basket-quantity": basket_quantity,
    "remove-from-basket": remove_from_basket,
    "admin-find-upc": admin_find_upc,
    "admin-rename-product": admin_rename_product,
    "admin-delete-product": admin_delete_product,
    "admin-create-category": admin_create_category,
}.items():
    EXPERTS[f"shop/{_name}"] = ShopExpert(f"shop/{_name}", _fn)
