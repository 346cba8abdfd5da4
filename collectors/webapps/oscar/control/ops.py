"""What the control API does, with Oscar's own models (``ACTIONS``: name -> fn(body) -> dict).

Episode objects (products, categories, users a task creates or changes) carry the episode's
``code`` (a short base-36 string): in the UPC (``EP<code>...``), at the end of a category's name,
in a user's e-mail.  ``cleanup`` removes every object of a code, so a reset restores the shop
without touching the seeded catalogue, and two contexts with different codes never share rows.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from oscar.core.loading import get_model

from collectors.webapps.oscar.data import catalogue as make_catalogue

Product = get_model("catalogue", "Product")
ProductClass = get_model("catalogue", "ProductClass")
Category = get_model("catalogue", "Category")
ProductCategory = get_model("catalogue", "ProductCategory")
Partner = get_model("partner", "Partner")
StockRecord = get_model("partner", "StockRecord")
STALE_MINUTES = 10  # episode products older than this are another episode's leftovers
SEEDED = "DW"  # the UPC prefix of the seeded catalogue
EPISODE = "EP"  # the UPC prefix of episode products


def _category(name: str):
    c = Category.objects.filter(name=name).first()
    return c or Category.add_root(name=name)


def _product(
    title: str,
    upc: str,
    category: str,
    price: str,
    stock: int,
    description: str = "",
    public: bool = True,
):
    pc, _ = ProductClass.objects.get_or_create(
        name="Goods", defaults={"requires_shipping": True, "track_stock": True}
    )
    partner, _ = Partner.objects.get_or_create(name="DynaShop")
    p = Product.objects.create(
        product_class=pc,
        title=title,
        upc=upc,
        description=description,
        structure="standalone",
        is_public=public,
    )
    ProductCategory.objects.create(product=p, category=_category(category))
    StockRecord.objects.create(
        product=p, partner=partner, partner_sku=upc, price=Decimal(price), num_in_stock=stock
    )
    return p


@transaction.atomic
def seed(body: dict) -> dict:
    """Load the seeded catalogue (idempotent: products already there are kept)."""
    data = make_catalogue(int(body.get("seed", 0)))
    for name in data["categories"]:
        _category(name)
    have = set(Product.objects.filter(upc__startswith=SEEDED).values_list("upc", flat=True))
    for p in data["products"]:
        if p["upc"] not in have:
            _product(p["title"], p["upc"], p["category"], p["price"], p["stock"], p["description"])
    for c in data["customers"]:
        customer(c["email"], first_name=c["first_name"], last_name=c["last_name"])
    return {"products": Product.objects.count(), "categories": Category.objects.count()}


def customer(email: str, staff: bool = False, first_name: str = "", last_name: str = ""):
    """The user with this e-mail (created with an unusable random password if new)."""
    User = get_user_model()
    u = User.objects.filter(email=email).first()
    if u is None:
        u = User(username=email[:150], email=email, first_name=first_name, last_name=last_name)
        u.set_unusable_password()  # logged in through the control API only
    u.is_staff = u.is_staff or staff
    u.is_superuser = u.is_superuser or staff  # Oscar's dashboard wants the permissions
    u.save()
    return u


def catalogue(body: dict) -> dict:
    out = []
    for p in Product.objects.filter(upc__startswith=SEEDED).order_by("upc"):
        sr = p.stockrecords.first()
        cat = p.categories.first()
        out.append(
            {
                "title": p.title,
                "upc": p.upc,
                "url": p.get_absolute_url(),
                "price": f"{sr.price:.2f}" if sr else None,
                "stock": sr.num_in_stock if sr else None,
                "category": cat.name if cat else None,
            }
        )
    cats = [
        {
            "name": c.name,
            "url": c.get_absolute_url(),
            "count": c.product_set.filter(upc__startswith=SEEDED).count(),
        }
        for c in Category.objects.order_by("name")
    ]
    return {"products": out, "categories": cats}


_FIRST_SEEN: dict[str, float] = {}  # episode category name -> when a cleanup first saw it


def _stale_categories() -> int:
    """Remove episode categories (a name ending in a 6-character code) that cleanups have seen
    for longer than ``STALE_MINUTES``: those of episodes that ended without their own cleanup.
    Categories carry no creation time, so this server remembers when it first saw each."""
    now, n = timezone.now().timestamp(), 0
    for c in Category.objects.filter(name__regex=r" [0-9a-z]{6}$"):
        first = _FIRST_SEEN.setdefault(c.name, now)
        if now - first > STALE_MINUTES * 60:
            c.delete()
            _FIRST_SEEN.pop(c.name, None)
            n += 1
    return n


@transaction.atomic
def cleanup(body: dict) -> dict:
    """Remove every episode object of ``code`` (products, categories, users), and episode
    products older than ``STALE_MINUTES`` (left by contexts that closed)."""
    code = str(body["code"])
    n = 0
    stale = timezone.now() - timedelta(minutes=STALE_MINUTES)
    for p in Product.objects.filter(upc__startswith=EPISODE + code) | Product.objects.filter(
        upc__startswith=EPISODE, date_created__lt=stale
    ):
        p.delete()
        n += 1
    for c in Category.objects.filter(name__endswith=" " + code):
        c.delete()
        n += 1
    n += _stale_categories()
    n += get_user_model().objects.filter(email__contains="." + code + "@").delete()[0]
    return {"removed": n}


@transaction.atomic
def episode(body: dict) -> dict:
    """Clean up ``code`` and create its episode objects: ``products`` and ``users``."""
    removed = cleanup(body)["removed"]
    urls = []
    for p in body.get("products", []):
        # not public: the shop's listings and search (other contexts' tasks) never show it
        made = _product(
            p["title"], p["upc"], p["category"], p["price"], int(p.get("stock", 5)), public=False
        )
        urls.append(made.get_absolute_url())
    for u in body.get("users", []):
        c = customer(
            u["email"], first_name=u.get("first_name", ""), last_name=u.get("last_name", "")
        )
        if u.get("password"):
            c.set_password(u["password"])
            c.save()
    return {"removed": removed, "urls": urls}


def product(body: dict) -> dict:
    p = Product.objects.filter(upc=body["upc"]).first()
    if p is None:
        return {"exists": False}
    sr = p.stockrecords.first()
    return {
        "exists": True,
        "title": p.title,
        "price": f"{sr.price:.2f}" if sr and sr.price is not None else None,
        "stock": sr.num_in_stock if sr else None,
        "url": p.get_absolute_url(),
    }


def category(body: dict) -> dict:
    c = Category.objects.filter(name=body["name"]).first()
    return {"exists": c is not None, "url": c.get_absolute_url() if c else None}


def user(body: dict) -> dict:
    u = get_user_model().objects.filter(email=body["email"]).first()
    if u is None:
        return {"exists": False}
    return {"exists": True, "first_name": u.first_name, "last_name": u.last_name}


def restore(body: dict) -> dict:
    """Put the seeded catalogue back where an agent changed it (titles, prices, stock, deleted
    products); returns how many products it repaired."""
    data = make_catalogue(int(body.get("seed", 0)))
    fixed = 0
    for want in data["products"]:
        p = Product.objects.filter(upc=want["upc"]).first()
        if p is None:
            _product(want["title"], want["upc"], want["category"], want["price"], want["stock"])
            fixed += 1
            continue
        sr = p.stockrecords.first()
        if (
            p.title != want["title"]
            or sr is None
            or sr.price != Decimal(want["price"])
            or (sr.num_in_stock != want["stock"])
        ):
            p.title = want["title"]
            p.save()
            if sr is not None:
                sr.price, sr.num_in_stock = Decimal(want["price"]), want["stock"]
                sr.save()
            fixed += 1
    return {"fixed": fixed}


ACTIONS = {
    "seed": seed,
    "catalogue": catalogue,
    "cleanup": cleanup,
    "episode": episode,
    "product": product,
    "category": category,
    "user": user,
    "restore": restore,
}
