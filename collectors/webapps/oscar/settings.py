"""Django settings of the shop: django-oscar 4.2 on SQLite, everything under ``DW_SHOP_HOME``.

Only the server process (``collectors.webapps.oscar.server``) imports this module.  It binds
127.0.0.1; the secret key and the control token are read from 0600 files the server writes.
"""

from __future__ import annotations

import os
from pathlib import Path

from oscar import INSTALLED_APPS as OSCAR_APPS
from oscar.defaults import *  # noqa: F403 - Oscar's documented way of taking its defaults

HOME = Path(os.environ.get("DW_SHOP_HOME", ".dynaweb/apps/oscar"))
SECRET_KEY = (HOME / "secret_key").read_text().strip()
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
SITE_ID = 1
ROOT_URLCONF = "collectors.webapps.oscar.urls"
INSTALLED_APPS = [*OSCAR_APPS, "collectors.webapps.oscar.control.ControlConfig"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "oscar.apps.basket.middleware.BasketMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # the suite's overrides of two Oscar templates (written by the server at start)
        "DIRS": [str(HOME / "templates")],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.debug",
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.template.context_processors.i18n",
                "django.contrib.messages.context_processors.messages",
                "oscar.apps.search.context_processors.search_form",
                "oscar.apps.checkout.context_processors.checkout",
                "oscar.core.context_processors.metadata",
            ]
        },
    }
]
AUTHENTICATION_BACKENDS = (
    "oscar.apps.customer.auth_backends.EmailBackend",
    "django.contrib.auth.backends.ModelBackend",
)
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(HOME / "shop.sqlite3"),
        # IMMEDIATE: a transaction takes the write lock at its start, so concurrent requests wait
        # (up to the timeout) instead of failing with "database is locked" on a lock upgrade
        "OPTIONS": {
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL;",
            "transaction_mode": "IMMEDIATE",
        },
    }
}
# Whoosh (pure Python): Oscar browses and searches the catalogue through haystack, and haystack's
# simple backend lists nothing for an empty query; the index is built at the server's start
HAYSTACK_CONNECTIONS = {
    "default": {
        "ENGINE": "haystack.backends.whoosh_backend.WhooshEngine",
        "PATH": str(HOME / "whoosh_index"),
    }
}
# The index is the seeded catalogue's, rebuilt at every start (server.main).  Oscar's default,
# the realtime processor, re-indexed a product on each save in the request's thread: under
# concurrent episodes a product the restore re-saved before its category was attached (or a
# whoosh write lost to the index lock) left it out of its category, and every category page
# listed "0 results".  Episode products are not public, so no listing needs them indexed.
HAYSTACK_SIGNAL_PROCESSOR = "haystack.signals.BaseSignalProcessor"
STATIC_URL = "/static/"
STATIC_ROOT = str(HOME / "static")
MEDIA_URL = "/media/"
MEDIA_ROOT = str(HOME / "media")
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-gb"
LANGUAGES = [("en-gb", "English")]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
PASSWORD_HASHERS = [
    "collectors.webapps.oscar.control.hashers.ShopPBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
OSCAR_SHOP_NAME = "DynaShop"
OSCAR_DEFAULT_CURRENCY = "USD"
OSCAR_PRODUCTS_PER_PAGE = 10  # a listing page fits the observation budget (docs/own-app.md)
OSCAR_DASHBOARD_ITEMS_PER_PAGE = 5  # the same for the dashboard's tables
OSCAR_THUMBNAILER = "collectors.webapps.oscar.control.thumbnails.NoThumbnails"
OSCAR_ALLOW_ANON_REVIEWS = True
OSCAR_MODERATE_REVIEWS = False
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
