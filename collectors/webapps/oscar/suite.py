"""The shop suite (``shop/...``): django-oscar tasks of ``tasks.yaml`` with their experts."""

from __future__ import annotations

from pathlib import Path

TASK_FILE = Path(__file__).with_name("tasks.yaml")


def register() -> None:
    from collectors.webapps.oscar.app import ShopApp
    from collectors.webapps.oscar.experts import EXPERTS
    from collectors.webapps.suites import register_app_suite

    register_app_suite(ShopApp(), TASK_FILE, EXPERTS)
