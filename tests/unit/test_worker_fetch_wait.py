"""The stream worker's fetch wait comes from ``stream.fetch_wait_ms`` (the embedded broker holds an
empty fetch for the whole wait, so the wait bounds how long a record can sit before it is read)."""

from __future__ import annotations

from types import SimpleNamespace

from core.config import load_config


def test_the_worker_consumer_takes_the_configured_fetch_wait() -> None:
    from streams.app import make_app, with_fetch_wait

    assert load_config(env={}).stream.fetch_wait_ms == 20
    for ms in (37, 20):
        make_app(load_config(env={}, overrides={"stream.fetch_wait_ms": ms, "run_id": "fw"}))
        faust_built = SimpleNamespace(_fetch_max_wait_ms=1500)  # Faust's hard-coded wait
        assert with_fetch_wait(faust_built)._fetch_max_wait_ms == ms
