"""`dynaweb eval policy`: a trainer checkpoint (from S3) acting in the live browser on
evaluation seeds, with the dreamed success of the same version next to it."""

from __future__ import annotations

import json

from core.config import Config
from infra.cli import main
from models.train.run import build_trainer
from streams import records
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.factories import small_trainer
from tests.integration.conftest_collectors import require_chromium
from tests.support import env_for


def test_eval_policy_live_with_dreams(run_cfg: Config, capsys, monkeypatch) -> None:
    require_chromium()
    cfg = small_trainer(run_cfg)
    cfg.collector.max_steps = 3
    topics = ensure_topics(cfg)
    tr = build_trainer(cfg)
    try:
        tr.setup()  # publishes v0
    finally:
        tr.close()
    pub = Publisher(make_producer(cfg.kafka))
    obs = {"instruction": "Click.", "url": "", "tree": '[1] button "OK"'}
    for i, r in enumerate((1.0, 0.0, 0.0)):
        pub.send(
            topics.dream,
            records.Transition(
                run_id=cfg.run_id,
                episode_id=f"d{i}",
                step=0,
                task="miniwob/click-button",
                seed=5,
                source="dream",
                policy_version=0,
                world_model_version=0,
                obs=obs,
                action="click(1)",
                next_obs=obs,
                reward=r,
                done=True,
                group_id="g1",
                behaviour_logprob=-1.0,
                action_tokens=9,
            ),
        )
    pub.flush()
    pub.close()
    for k, v in env_for(cfg).items():
        monkeypatch.setenv(k, v)
    hi = cfg.collector.seed_stop
    argv = [
        "eval",
        "policy",
        "--checkpoint",
        "latest",
        "--tasks",
        "click-button",
        "--seeds",
        f"{hi}:{hi + 2}",
        "--json",
        "--set",
        "collector.max_steps=3",
    ]  # the model's shape comes from the checkpoint
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    t = res["tasks"]["miniwob/click-button"]
    assert res["policy_version"] == 0 and res["interval"] == "wilson95" and res["episodes"] == 2
    assert t["episodes"] == 2 and 0.0 <= t["ci95_low"] <= t["success_rate"] <= t["ci95_high"] <= 1.0
    assert 1 <= t["mean_steps"] <= 3 and t["errors"] == 0
    d = res["dreams"]
    assert d["available"] and d["tasks"]["miniwob/click-button"]["rollouts"] == 3
    assert abs(d["by_version"]["0"]["success_rate"] - 1 / 3) < 1e-9
    assert d["by_version"]["0"]["nonzero_advantage_share"] == 1.0


def test_eval_world_model_on_the_eval_topic(run_cfg: Config, capsys, monkeypatch) -> None:
    cfg = small_trainer(run_cfg)
    topics = ensure_topics(cfg)
    tr = build_trainer(cfg)
    try:
        tr.setup()  # world model v0
    finally:
        tr.close()
    pub = Publisher(make_producer(cfg.kafka))
    obs = {"instruction": "Click.", "url": "", "tree": '[1] button "OK"'}
    nxt = {**obs, "tree": '[1] button "OK"\n[2] text "Done"'}
    for i in range(3):
        pub.send(
            topics.world_model_eval,
            records.Transition(
                run_id=cfg.run_id,
                episode_id=f"e{i}",
                step=0,
                task="miniwob/click-button",
                seed=5,
                source="real",
                policy_version=0,
                world_model_version=0,
                obs=obs,
                action="click(1)",
                next_obs=nxt if i else obs,
                reward=float(i == 1),
                done=i == 1,
            ),
        )
    pub.send(
        topics.world_model_eval,
        records.Transition(  # dreams never count
            run_id=cfg.run_id,
            episode_id="d",
            step=0,
            task="t",
            seed=5,
            source="dream",
            policy_version=0,
            world_model_version=0,
            obs=obs,
            action="click(1)",
            next_obs=obs,
            reward=0.0,
            done=False,
        ),
    )
    pub.flush()
    pub.close()
    for k, v in env_for(cfg).items():
        monkeypatch.setenv(k, v)
    assert (
        main(
            [
                "eval",
                "world-model",
                "--checkpoint",
                "0",
                "--json",
                "--set",
                "dream.max_change_tokens=16",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["checkpoint"] == 0 and res["n"] == 3 and res["episodes"] == 3
    assert (
        abs(res["baseline_exact_match"] - 1 / 3) < 1e-9
        and "change_f1" in res
        and "done_bal_acc" in res
    )


def test_live_policy_deadline_stops_starting_episodes_and_marks_the_rest() -> None:
    """A slow policy (0.3 s per action, pressing Shift: never ends an episode before max_steps) on
    the real page: with a 1.5 s deadline (from when Chromium is up) the first episodes run, none starts after it, and
    every job not run is a 'deadline' row."""
    import time

    from core.spaces import Action
    from evaluation.eval.policy import run_live_policy

    require_chromium()

    class Slow:  # a scripted policy, acting through the public action space
        def act(self, obs_list, hists, temperature=1.0, greedy=True):
            time.sleep(0.3)
            return [(Action.press("Shift"), 0.0, 1) for _ in obs_list]

    cfg = Config(run_id="deadline")
    cfg.collector.max_steps = 2
    t0 = time.time()
    rows = run_live_policy(cfg, Slow(), ["miniwob/click-button"], list(range(8)), deadline_s=1.5)
    wall = time.time() - t0
    assert len(rows) == 8 and {r["seed"] for r in rows} == set(range(8))
    ran = [r for r in rows if "error" not in r]
    late = [r for r in rows if r.get("error") == "deadline"]
    assert ran and late and len(ran) + len(late) == 8
    assert all(r["steps"] == 2 and not r["success"] for r in ran)
    assert wall < 1.5 + 5 + 15  # the deadline, the cut of an episode in flight, Chromium's start


def test_eval_policy_with_look_ahead_pairs_it_against_greedy(
    run_cfg: Config, capsys, monkeypatch
) -> None:
    """``--lookahead 2``: the policy's two best actions simulated in the world model of the same
    version (from S3) on the same episodes.  Version 0's world model has no trained heads, so
    look-ahead acts greedily on every decision and says so: the paired difference is exactly 0."""
    require_chromium()
    cfg = small_trainer(run_cfg)
    ensure_topics(cfg)
    tr = build_trainer(cfg)
    try:
        tr.setup()  # publishes v0 of both models
    finally:
        tr.close()
    for k, v in env_for(cfg).items():
        monkeypatch.setenv(k, v)
    hi = cfg.collector.seed_stop
    argv = ["eval", "policy", "--tasks", "click-button", "--seeds", f"{hi}:{hi + 2}", "--json"]
    argv += ["--no-dreams", "--lookahead", "2", "--set", "collector.max_steps=3"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    la = res["lookahead"]
    assert la["k"] == 2 and la["depth"] == 1 and la["world_model_version"] == 0
    assert la["episodes"] == 2 and la["decisions"] >= 2
    assert la["greedy_for_lack_of_heads"] == la["decisions"] and la["changed_share"] == 0.0
    assert la["minus_greedy_points"] == 0.0 and la["success_rate"] == res["success_rate"]
    assert la["wm_rows_per_decision"] > 0 and la["seconds_per_decision"] > 0
