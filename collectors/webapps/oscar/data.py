"""The shop's seeded data, made by the suite (no Django needed to compute it).

``catalogue(seed)`` is the catalogue the server loads at its first start: categories, products
(title, UPC, price, stock, description) and customers.  The same seed always gives the same
catalogue; tasks draw from it per episode seed (``collectors.webapps.oscar.tasks``).
"""

from __future__ import annotations

import random

CATEGORIES = ["Kitchen", "Garden", "Office", "Outdoor", "Lighting", "Bathroom", "Toys", "Audio"]
ADJECTIVES = [
    "Amber", "Brisk", "Cedar", "Dusky", "Ember", "Frost", "Golden", "Hazel", "Indigo", "Juniper",
    "Kestrel", "Lunar", "Maple", "Nimbus", "Onyx", "Pebble", "Quartz", "Russet", "Sable", "Tidal",
    "Umber", "Velvet", "Willow", "Zephyr",
]  # fmt: skip
NOUNS = {
    "Kitchen": ["Kettle", "Skillet", "Whisk", "Teapot", "Colander", "Grater"],
    "Garden": ["Trowel", "Planter", "Hose", "Rake", "Shears", "Birdbath"],
    "Office": ["Stapler", "Notebook", "Desk Lamp", "Binder", "Pen Set", "Monitor Stand"],
    "Outdoor": ["Tent", "Lantern", "Backpack", "Hammock", "Compass", "Cooler"],
    "Lighting": ["Pendant", "Floor Lamp", "Sconce", "Night Light", "Fairy Lights", "Lantern Bulb"],
    "Bathroom": ["Towel", "Soap Dish", "Bath Mat", "Mirror", "Shower Caddy", "Toothbrush Cup"],
    "Toys": ["Kite", "Puzzle", "Yo-yo", "Robot", "Spinning Top", "Marble Run"],
    "Audio": ["Speaker", "Headphones", "Turntable", "Radio", "Earbuds", "Soundbar"],
}
FIRST = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kira", "Leo"]
LAST = ["Moss", "Reed", "Stone", "Vale", "Brook", "Hale", "Frost", "Lane", "Wren", "Ash"]
PER_CATEGORY = (3, 6)  # products per category, drawn


def catalogue(seed: int = 0) -> dict:
    """``{"categories": [...], "products": [...], "customers": [...]}`` for ``seed``."""
    rng = random.Random(f"dynashop-{seed}")
    products, used = [], set()
    for ci, cat in enumerate(CATEGORIES):
        nouns = list(NOUNS[cat])
        rng.shuffle(nouns)
        for noun in nouns[: rng.randint(*PER_CATEGORY)]:
            while True:
                title = f"{rng.choice(ADJECTIVES)} {noun}"
                if title not in used:
                    used.add(title)
                    break
            price = f"{rng.randint(3, 199)}.{rng.choice(['00', '49', '95', '99'])}"
            products.append(
                {
                    "title": title,
                    "upc": f"DW{ci}{len(products):03d}{rng.randint(10, 99)}",
                    "category": cat,
                    "price": price,
                    "stock": rng.randint(2, 40),
                    "description": f"A {title.lower()} for your {cat.lower()}.",
                }
            )
    customers = []
    for i in range(8):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        customers.append(
            {
                "email": f"{first.lower()}.{last.lower()}{i}@example.com",
                "first_name": first,
                "last_name": last,
            }
        )
    words = sorted({p["title"].split()[0] for p in products})
    return {
        "categories": list(CATEGORIES),
        "products": products,
        "customers": customers,
        # search words (the titles' first words) with how many titles start with each
        "words": [
            {"word": w, "count": sum(p["title"].split()[0] == w for p in products)} for w in words
        ],
    }
