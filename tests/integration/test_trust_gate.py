"""The per-task trust gate end to end (``dream.trust_gate``, ``models/dream/trust.py``): the real
trainer (``dynaweb train``), a real dream generator (``dynaweb dream``) and the real stream worker
on the session's stack (S3 + broker).

Two tasks give start states: ``miniwob/click-button`` from expert episodes only (never judged: the
trainer judges real episode ends alone) and ``miniwob/judged`` from real episodes, published while
the run goes on.  The trainer judges each real episode end before its world model trains on it and
reports the task's trust (``dynaweb_trainer_task_trust``, with ``gated``) and writes it into the
world model's manifest; the dream generator, reading it from there, dreams the judged task and
never the one the gate holds back.  The bar (2 judged ends, any accuracy) is low on purpose: the
test is about where the gate's state goes, not about how good a tiny world model gets.  The
world model's ensemble (on by default) measures its disagreement on every dreamed step it
predicts (``dynaweb_dream_disagreement``).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import uuid

import pytest

from core.config import Config
from core.metrics import scrape_targets
from models.train.run import build_trainer
from streams import kafka as sk
from streams import records
from tests.integration.dream_support import SMALL, _sum, _two_button_episode
from tests.support import ROOT, Worker, env_for, wait_for

pytestmark = pytest.mark.integration

JUDGED, EXPERT_ONLY = "miniwob/judged", "miniwob/click-button"
GATE = {
    "DYNAWEB_DREAM__TRUST_GATE": "true",
    "DYNAWEB_DREAM__TRUST_MIN_EPISODES": "2",
    "DYNAWEB_DREAM__TRUST_MIN_ACCURACY": "0",
    "DYNAWEB_DREAM__TRUST_MAX_GAP": "1",
}


def _real_episode(run: str, i: int) -> records.Transition:
    """A one-step real episode of ``JUDGED`` on the two-button page: "OK" succeeds (even ``i``)."""
    (t,) = _two_button_episode(run, i)
    return dataclasses.replace(
        t, episode_id=f"real-{uuid.uuid4().hex[:10]}", source="real", task=JUDGED
    )


def _samples(scraped: list, component: str, name: str) -> list[tuple[dict, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for lab, text in scraped:
        if lab.get("component") == component:
            for fam in text_string_to_metric_families(text):
                out += [(s.labels, float(s.value)) for s in fam.samples if s.name == name]
    return out


def test_the_dream_generator_dreams_only_the_tasks_the_trainer_trusts(
    run_cfg: Config, tmp_path
) -> None:
    cfg = run_cfg
    cfg.model.layers, cfg.model.d_model, cfg.model.heads = 1, 32, 2
    topics = sk.ensure_topics(cfg)
    tr = build_trainer(cfg)
    try:
        tr.setup()  # version 0 in S3 (the generator's first load)
    finally:
        tr.close()
    w = Worker(
        cfg.kafka.bootstrap,
        tmp_path,
        cfg.run_id,
        group_size=2,
        batch_trajectories=4,
        expert_fraction=0.5,
        samples_per_insert=0,
        cold_start_batch_s=1.0,
        group_timeout_s=20,
    )
    w.start()
    p = sk.make_producer(cfg.kafka, linger_ms=0)
    for i in range(12):  # expert start states of the task the gate never admits
        for t in _two_button_episode(cfg.run_id, i):
            p.send(topics.expert, value=records.encode(t), key=t.episode_id.encode())
    p.flush()
    env = env_for(cfg, **SMALL, **GATE, PYTHONPATH=str(ROOT))
    procs, logs = {}, {}
    for name in ("train", "dream"):
        logs[name] = open(tmp_path / f"{name}.log", "wb")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "infra.cli", name],
            cwd=ROOT,
            env=env,
            stdout=logs[name],
            stderr=subprocess.STDOUT,
        )
    seen: dict = {"reals": 0}

    def progress() -> bool:
        for name, proc in procs.items():
            if proc.poll() is not None:
                tail = (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{name} exited {proc.returncode}:\n{tail}")
        sc = scrape_targets(cfg)
        judged = seen.get("trust", {}).get((JUDGED, "episodes"), 0.0)
        # a real episode every turn until a few were judged: ends that arrive before the world
        # model's first step are dropped unjudged, and a loaded machine takes long to get there
        if judged < 4 and seen["reals"] < 200:
            t = _real_episode(cfg.run_id, seen["reals"])
            p.send(topics.real, value=records.encode(t), key=t.episode_id.encode())
            p.flush()
            seen["reals"] += 1
        trust = {
            (lab["task"], lab["measure"]): v
            for lab, v in _samples(sc, "trainer", "dynaweb_trainer_task_trust")
        }
        seen["trust"] = trust
        seen["trusted"] = {
            lab["task"]: v for lab, v in _samples(sc, "dream", "dynaweb_dream_task_trusted")
        }
        seen["dreamed"] = {
            lab["task"] for lab, _ in _samples(sc, "dream", "dynaweb_dream_task_success_rate")
        }
        seen["rollouts"] = _sum(sc, "dream", "dynaweb_dream_rollouts_total")
        seen["disagreement_steps"] = _sum(sc, "dream", "dynaweb_dream_disagreement_count")
        # nothing is dreamed before the gate admits a task: one group dreamed is the gate's doing
        return trust.get((JUDGED, "gated")) == 1.0 and seen["rollouts"] >= 2

    try:
        try:
            wait_for(progress, 540, "dreams of the trusted task", every=2.0)
        except AssertionError as e:
            tail = (tmp_path / "dream.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"{e}: {seen}\n{tail}") from None
    finally:
        p.close()
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for fh in logs.values():
            fh.close()
        w.stop()
    trust = seen["trust"]
    print(f"\ntrust {trust}\ndream admits {seen['trusted']}, dreamed {seen['dreamed']}")
    # the trainer judged the real task and reports it admitted; the expert-only task is never judged
    assert trust[(JUDGED, "episodes")] >= 2 and (EXPERT_ONLY, "episodes") not in trust
    assert 0.0 <= trust[(JUDGED, "balanced_accuracy")] <= 1.0
    # the generator read the gate's state from the manifest: it holds the expert-only task back
    # and dreamed the judged task alone
    assert seen["trusted"].get(EXPERT_ONLY) == 0.0 and seen["trusted"].get(JUDGED) == 1.0
    assert seen["dreamed"] == {JUDGED}
    # the world model's ensemble was trained and measured its disagreement on the dreamed steps
    assert seen["disagreement_steps"] > 0
