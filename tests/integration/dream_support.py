"""What the dream integration tests share (tests/integration/test_dream_pacing.py,
test_trust_gate.py): tiny models by environment, a metric summed over a component's scrapes, and a
one-step expert episode on a page with two buttons."""

from __future__ import annotations

import dataclasses
import uuid

from core.spaces import Observation
from streams import records
from tests.factories import transition

SMALL = {
    "DYNAWEB_MODEL__LAYERS": "1",
    "DYNAWEB_MODEL__D_MODEL": "32",
    "DYNAWEB_MODEL__HEADS": "2",
    "DYNAWEB_DREAM__GROUP_SIZE": "2",
    "DYNAWEB_DREAM__HORIZON": "2",
    "DYNAWEB_DREAM__BATCH": "4",
    "DYNAWEB_DREAM__MAX_CHANGE_TOKENS": "12",
    "DYNAWEB_STREAM__GROUP_SIZE": "2",
    "DYNAWEB_STREAM__BATCH_TRAJECTORIES": "4",
    "DYNAWEB_TRAINER__CHECKPOINT_EVERY": "2",  # a new version every 2 steps: staleness bites
    "DYNAWEB_THREADS": "1",
}


def _sum(scraped: list, component: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for lab, text in scraped:
        if lab.get("component") != component:
            continue
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += float(s.value)
    return total


def _two_button_episode(run: str, i: int) -> list[records.Transition]:
    """A one-step expert episode on a page with two buttons: clicking "OK" succeeds (even
    ``i``), clicking "No" fails (odd ``i``), so the reward the world model learns depends on
    the action and the policy imitates both."""
    page = Observation(
        'Click on the "OK" button.', "", '[1] button "OK"\n[2] button "No"', None, "", 3, [1, 2]
    )
    ok = i % 2 == 0
    after = Observation(
        page.instruction, "", f'[{1 if ok else 2}] button "clicked"', None, "", 3, [1]
    )
    t = transition(run, f"expert-{uuid.uuid4().hex[:10]}", 0, "expert", True, seed=i)
    return [
        dataclasses.replace(
            t,
            obs=page.to_dict(),
            action="click(1)" if ok else "click(2)",
            next_obs=after.to_dict(),
            reward=1.0 if ok else 0.0,
        )
    ]
