"""Checkpoint gating on the real stack: a gated trainer writes candidates to S3, the gate probes
them against LATEST (world-model fidelity on the run's held-out topic; a live evaluation in
Chromium) and moves LATEST only for a candidate that is not worse by more than the margin;
generator-side ModelSlots follow only promoted versions; the trainer resumes from its newest."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from core.config import Config
from core.s3 import make_client
from core.spaces import Observation
from evaluation.gate import GATE_DECISIONS, Gate
from infra.cli import main
from models.checkpoints.reader import ModelSlot
from models.checkpoints.store import CheckpointStore
from models.lm.saved import make_model
from models.train.run import build_trainer
from models.world_model.loss import world_model_batch_loss
from models.world_model.model import WorldModel
from streams import records
from streams.kafka import Publisher, ensure_topics, is_control, make_producer, read_until_sentinel
from tests.factories import small_trainer
from tests.integration.conftest_collectors import require_chromium
from tests.support import env_for

A = Observation(
    'Enter "Kiera" and press Submit.', "u", '[1] textbox "Name"\n[2] button "Submit"', next_id=3
)
A2 = Observation("Click OK.", "u", '[4] button "OK"\n[5] link "Help"', next_id=6)
B = Observation(
    A.instruction, "u", '[1] textbox "Name" value "Kiera"\n[2] button "Submit"', next_id=3
)
B2 = Observation(A2.instruction, "u", '[6] heading "Done"', next_id=7)


def _heldout(cfg: Config) -> list[records.Transition]:
    return [
        records.Transition(
            run_id=cfg.run_id,
            episode_id=f"h{i}",
            step=0,
            task="miniwob/click-button",
            seed=5,
            source="real",
            policy_version=0,
            world_model_version=0,
            obs=o.to_dict(),
            action=a,
            next_obs=n.to_dict(),
            reward=r,
            done=d,
        )
        for i, (o, a, n, r, d) in enumerate(
            ((A, 'type(1, "Kiera")', B, 0.0, False), (A2, "click(4)", B2, 1.0, True))
        )
    ]


def _trained_world_model(cfg: Config, data: list) -> dict:
    """A world model that predicts the held-out transitions (overfit): the 'good' candidate."""
    torch.manual_seed(0)
    model, tok = make_model(WorldModel, cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        opt.zero_grad()
        loss, m = world_model_batch_loss(
            model, tok, data, cfg.trainer, None, cfg.dream.max_change_tokens
        )
        loss.backward()
        opt.step()
    assert m["lm_loss"] < 0.05, m
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _announced(cfg: Config, kind: str) -> list[int]:
    topic = ensure_topics(cfg).checkpoints
    out = []
    for _m, raw in read_until_sentinel(cfg.kafka, topic, cfg.run_id, timeout=30):
        if raw is not None and not is_control(raw):
            rec = records.decode(raw, expect="checkpoint")
            if rec.kind == kind:
                out.append(rec.version)
    return out


def test_world_model_gate_promotes_better_rejects_worse(
    run_cfg: Config, tmp_path: Path, capsys, monkeypatch
) -> None:
    cfg = small_trainer(run_cfg)
    cfg.dream.max_change_tokens = 128
    cfg.gate.enabled, cfg.gate.probes, cfg.gate.wm_margin = True, ["world_model"], 0.05
    topics = ensure_topics(cfg)
    data = _heldout(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    for t in data:
        pub.send(topics.world_model_eval, t)
    pub.flush()
    pub.close()
    good = _trained_world_model(cfg, data)
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    slots = {k: ModelSlot(store, k, tmp_path / k, cfg.run_id) for k in ("policy", "world_model")}
    for s in slots.values():
        s.work.mkdir()
    gate = Gate(cfg)
    rejected0 = GATE_DECISIONS.labels(cfg.run_id, "rejected")._value.get()
    tr = build_trainer(cfg)
    try:
        tr.setup()  # v0 (random world model): the first version becomes LATEST without a gate
        assert (
            store.latest("world_model")["version"] == 0
            and store.decision("policy", 0)["by"] == "trainer"
        )
        assert all(s.refresh() and s.version == 0 for s in slots.values())
        random_wm = {
            k: v.detach().clone() for k, v in tr.learner.w_engine.module.state_dict().items()
        }
        assert gate.run_once() is None  # nothing newer than LATEST

        tr.learner.w_engine.module.load_state_dict(good)
        tr.version = 1
        tr.checkpoint()  # a candidate: written, LATEST stays, generators stay
        assert (
            store.versions("world_model") == [0, 1] and store.latest("world_model")["version"] == 0
        )
        assert not any(s.refresh() for s in slots.values())
        res = gate.run_once()
        assert res["version"] == 1 and res["decision"] == "promoted", res
        wm = res["figures"]["world_model"]
        assert wm["candidate"] == 1.0 and wm["baseline"] < 0.5, (
            wm
        )  # change F1 of both on the held-out pair
        assert res["candidate_probes"]["world_model"]["n"] == 2
        assert (
            store.latest("policy")["version"] == 1 and store.latest("world_model")["version"] == 1
        )
        assert all(s.refresh() and s.version == 1 for s in slots.values())

        tr.learner.w_engine.module.load_state_dict(
            random_wm
        )  # a worse candidate (the trainer keeps its own weights)
        tr.version = 2
        tr.checkpoint()
        res = gate.run_once()
        assert res["version"] == 2 and res["decision"] == "rejected", res
        assert res["baseline_version"] == 1 and "world_model: candidate" in res["reason"]
        assert (
            store.latest("policy")["version"] == 1 and store.latest("world_model")["version"] == 1
        )
        assert not any(s.refresh() for s in slots.values()) and slots["world_model"].version == 1
        assert store.decision("world_model", 2)["decision"] == "rejected"
        assert GATE_DECISIONS.labels(cfg.run_id, "rejected")._value.get() == rejected0 + 1
        assert gate.run_once() is None  # decided: not probed again
        for v in (3, 4):  # two candidates before the gate looks: only the newest is probed
            tr.version = v
            tr.checkpoint()
        res = gate.run_once()
        assert (
            res["version"] == 4
            and res["decision"] == "rejected"
            and store.latest("policy")["version"] == 1
        )
        assert store.decision("policy", 3)["decision"] == "superseded"
    finally:
        tr.close()
    # generators were told about promoted versions only (the candidates were not announced)
    assert _announced(cfg, "world_model") == [0, 1] and _announced(cfg, "policy") == [0, 1]

    # a gated trainer resumes from its newest version (the rejected v4), not from LATEST
    tr2 = build_trainer(cfg)
    try:
        tr2.setup()
        assert tr2.version == 4
        w = tr2.learner.w_engine.module.state_dict()
        assert all(torch.equal(w[k], random_wm[k]) for k in random_wm)
    finally:
        tr2.close()

    for k, v in env_for(cfg).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DYNAWEB_GATE__ENABLED", "true")
    assert main(["checkpoint", "list", "--kind", "world_model", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["latest"] == 1 and out["gate"] == {
        "0": "gate:promoted",
        "1": "gate:promoted",
        "2": "gate:rejected",
        "3": "gate:superseded",
        "4": "gate:rejected",
    }
    assert out["decisions"]["2"]["baseline_version"] == 1
    assert main(["checkpoint", "list", "--kind", "world_model"]) == 0
    text = capsys.readouterr().out
    assert (
        "     2 gate:rejected  (world_model: candidate" in text
        and "     1 LATEST gate:promoted" in text
    )
    # the manual override still works: promote the rejected version
    assert main(["checkpoint", "promote", "2", "--kind", "world_model"]) == 0
    assert store.latest("world_model")["version"] == 2 and slots["world_model"].refresh()


def test_live_policy_gate_and_cli(run_cfg: Config, capsys, monkeypatch) -> None:
    require_chromium()
    cfg = small_trainer(run_cfg)
    cfg.gate.enabled, cfg.gate.probes = True, ["policy"]
    cfg.gate.tasks, cfg.gate.max_steps = ["click-button"], 2
    hi = cfg.collector.seed_stop
    cfg.gate.seeds = f"{hi + 500}:{hi + 502}"
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    tr = build_trainer(cfg)
    try:
        tr.setup()  # v0 -> LATEST
        tr.version = 1
        tr.checkpoint()  # the same weights as v0: the same greedy episodes
        for k, v in env_for(cfg).items():
            monkeypatch.setenv(k, v)
        gated = [
            "--set",
            "gate.enabled=true",
            "--set",
            "gate.probes=policy",
            "--set",
            "gate.tasks=click-button",
            "--set",
            "gate.max_steps=2",
            "--set",
            f"gate.seeds={cfg.gate.seeds}",
        ]
        assert main(["gate", "--once", "--json", *gated]) == 0
        res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert res["version"] == 1 and res["decision"] == "promoted", res
        pol = res["candidate_probes"]["policy"]
        assert pol["episodes"] == 2 and pol["errors"] == 0 and 0.0 <= pol["score"] <= 1.0
        assert res["figures"]["policy"]["candidate"] == res["figures"]["policy"]["baseline"]
        assert store.latest("policy")["version"] == 1
        tr.version = 2
        tr.checkpoint()
        # a margin the same policy cannot meet (it must beat LATEST by 0.5): rejected, LATEST stays
        assert main(["gate", "--once", "--json", *gated, "--set", "gate.policy_margin=-0.5"]) == 0
        res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert (
            res["version"] == 2
            and res["decision"] == "rejected"
            and "policy: candidate" in res["reason"]
        )
        assert (
            store.latest("policy")["version"] == 1 and store.latest("world_model")["version"] == 1
        )
        assert main(["gate", "--once", "--json", *gated]) == 0
        assert (
            json.loads(capsys.readouterr().out.strip().splitlines()[-1])["reason"] == "no candidate"
        )
    finally:
        tr.close()
