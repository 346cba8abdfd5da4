"""The data-parallel trainer on the real stack (Tansu, SeaweedFS), 2 gloo ranks on CPU:
``dynaweb train --ranks 2`` trains one batch read from the topic to the same weights and optimizer
state as one rank on that batch, only rank 0 writes and announces the checkpoints, and a killed
rank stops the group with an error naming it, after which the supervisor restarts the group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from core.config import Config
from core.metrics import run_targets
from core.s3 import make_client
from core.spaces import Observation
from core.supervise import Supervisor
from evaluation.bench.synthetic import synthetic_batch
from models.checkpoints.store import CheckpointStore
from models.train.run import build_trainer
from streams import records
from streams.checkpoints import announcement_of
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.support import ROOT, Reader, env_for, fresh_run, wait_for

PAGES = [
    Observation.from_dict(
        {
            "instruction": f"Click B{i}-2",
            "url": "http://127.0.0.1/t",
            "tree": "\n".join(f'[{j}] button "B{i}-{j}"' for j in range(1, 5)),
            "next_id": 5,
        }
    )
    for i in range(3)
]
SMALL = {  # tiny models, one step, a checkpoint at every step
    "model.layers": "1",
    "model.d_model": "32",
    "model.heads": "2",
    "trainer.checkpoint_every": "1",
    "trainer.infonce_weight": "0.0",
    "stream.batch_trajectories": "5",  # 2 experts + a GSPO group of 3: uneven shares
    "stream.expert_fraction": "0.4",
}


def _small(cfg: Config) -> Config:
    from core.config import apply_overrides

    apply_overrides(cfg, dict(SMALL))
    return cfg


def _env(cfg: Config, **extra: str) -> dict:
    env = env_for(cfg, **extra)
    env.update({f"DYNAWEB_{k.replace('.', '__').upper()}": v for k, v in SMALL.items()})
    env["PYTHONPATH"] = str(ROOT)
    return env


def _publish_batch(cfg: Config) -> None:
    trajs, _ = synthetic_batch(cfg, PAGES, 0)
    batch = records.TrainingBatch(
        run_id=cfg.run_id,
        batch_id="b0",
        worker_id="w",
        kind="mixed",
        trajectories=[asdict(t) for t in trajs],
        expert_fraction=0.4,
    )
    pub = Publisher(make_producer(cfg.kafka))
    pub.send(ensure_topics(cfg).policy_batches, batch)
    pub.flush()


def _download(cfg: Config, version: int, dest: Path) -> tuple[dict, dict, dict]:
    """(weights, Adam's first moments, manifest) of the policy ``version`` of ``cfg``'s run."""
    from safetensors.torch import load_file

    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    entry = store.latest("policy")
    assert entry["version"] == version
    manifest = store.download("policy", version, dest, entry["manifest_sha256"])
    weights = {}
    for f in (dest / "hf").rglob("*.safetensors"):
        weights.update({f"{f.name}:{k}": v for k, v in load_file(str(f)).items()})
    (states,) = list((dest / "state").rglob("mp_rank_00_model_states.pt"))
    opt = torch.load(states, map_location="cpu", weights_only=False)["optimizer"]["state"]
    return weights, {k: s["exp_avg"] for k, s in opt.items()}, manifest


def test_two_ranks_train_one_batch_as_one_rank_and_only_rank_0_writes(
    run_cfg: Config, tmp_path: Path
) -> None:
    one = _small(run_cfg)
    one.trainer.max_steps = 1
    two = fresh_run(one)
    _publish_batch(one)
    _publish_batch(two)
    proc = subprocess.Popen(  # 2 ranks while this process trains 1
        [sys.executable, "-m", "infra.cli", "train", "--ranks", "2", "--max-steps", "1"],
        env=_env(two),
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    tr = build_trainer(one)
    try:
        tr.setup()
        tr.loop()
        assert tr.policy_steps == 1 and tr.version == 1
    finally:
        tr.close()
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    w1, m1, _ = _download(one, 1, tmp_path / "one")
    w2, m2, manifest = _download(two, 1, tmp_path / "two")
    assert set(w1) == set(w2) and set(m1) == set(m2) and m1
    diff = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    moved = max(float((w1[k] - w0).abs().max()) for k, w0 in _initial(one).items() if k in w1)
    assert moved > 0 and diff <= 1e-6, (diff, moved)
    # Adam's first moment is (1 - beta1) x the gradient: the same scale, not just the same step
    for k in m1:
        assert torch.allclose(m1[k], m2[k], rtol=1e-4, atol=1e-7), k
    # only rank 0 wrote: one announcement per kind and version, rank 1 logged no checkpoint
    assert manifest["extra"]["ranks"] == 2 and manifest["offsets"]
    reader = Reader(two.kafka.bootstrap, ensure_topics(two).checkpoints)
    try:
        got = reader.until(lambda rs: len(rs) >= 4, 20, "4 announcements")
        time.sleep(1.0)
        anns = [a for a in (announcement_of(m.value) for m in reader.poll()) if a is not None]
    finally:
        reader.close()
    assert sorted((a.kind, a.version) for a in anns) == [
        ("policy", 0),
        ("policy", 1),
        ("world_model", 0),
        ("world_model", 1),
    ], got
    rank0 = [x for x in out.splitlines() if x.startswith("[rank 0]")]
    rank1 = [x for x in out.splitlines() if x.startswith("[rank 1]")]
    assert any("checkpoint v1 written" in x for x in rank0), out[-3000:]
    assert rank1 and not any("checkpoint v" in x for x in rank1), out[-3000:]
    assert any("rank 0 stopped the group" in x for x in rank1), out[-3000:]


def _initial(cfg: Config) -> dict:
    """The v0 weights of ``cfg``'s run (the same initial weights for both runs: same seed)."""
    import tempfile

    from safetensors.torch import load_file

    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    with tempfile.TemporaryDirectory() as d:
        dest = Path(d) / "v0"
        store.download("policy", 0, dest, None)
        out = {}
        for f in (dest / "hf").rglob("*.safetensors"):
            out.update({f"{f.name}:{k}": v.clone() for k, v in load_file(str(f)).items()})
    return out


def _rank_pids(cfg: Config) -> dict[int, int]:
    """rank -> pid of the trainer ranks registered for ``cfg``'s run."""
    out = {}
    for _f, entry in run_targets(cfg):
        lab = entry["labels"]
        if lab.get("component") == "trainer" and "rank" in lab:
            pid = int(lab["pid"])
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            out[int(lab["rank"])] = pid
    return out


def test_a_killed_rank_stops_the_group_and_the_supervisor_restarts_it(run_cfg: Config) -> None:
    cfg = _small(run_cfg)
    cfg.trainer.ranks = 2
    cfg.up.restart_backoff_s = 1.0
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    sup = Supervisor(cfg, {"trainer": ["train"]})
    child = sup.child("trainer")

    def supervised(cond):
        def check():
            sup.supervise()
            return cond()

        return check

    try:
        pids = wait_for(
            supervised(
                lambda: len(_rank_pids(cfg)) == 2 and store.latest("policy") and _rank_pids(cfg)
            ),
            180,
            "both ranks up and version 0 written",
            every=0.5,
        )
        os.kill(pids[1], signal.SIGKILL)
        wait_for(supervised(lambda: child.restarts >= 1), 60, "the group exits", every=0.2)
        assert child.exits[-1] == 1
        log = child.log.read_text()
        assert f"rank 1 (pid {pids[1]}) was killed by SIGKILL" in log, log[-3000:]
        assert "trainer rank 0 of 2: rank 1 is lost" in log, log[-3000:]
        # the supervisor starts the group again: two new ranks, resumed from version 0
        again = wait_for(
            supervised(
                lambda: (
                    (p := _rank_pids(cfg))
                    and len(p) == 2
                    and set(p.values()).isdisjoint(pids.values())
                    and p
                )
            ),
            180,
            "the group restarted",
            every=0.5,
        )
        assert set(again) == {0, 1}
        wait_for(supervised(lambda: "resumed from v0" in child.log.read_text()), 60, "resume")
        # rank 0 killed: rank 1 names it (the rendezvous store lived in rank 0's process)
        os.kill(again[0], signal.SIGKILL)
        wait_for(supervised(lambda: child.restarts >= 2), 60, "the group exits again", every=0.2)
        log = child.log.read_text()
        assert f"rank 0 (pid {again[0]}) was killed by SIGKILL" in log, log[-3000:]
        assert "trainer rank 1 of 2: rank 0 is lost" in log, log[-3000:]
    finally:
        sup.stop()
