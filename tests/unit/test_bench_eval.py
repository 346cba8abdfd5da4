"""`dynaweb bench dream|train` and `dynaweb eval world-model` on tiny configs: the JSON keys,
plus the pieces of `dynaweb eval policy` that need no browser (seed refusal, Wilson, dreams)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from core.spaces import Observation
from infra.cli import main
from streams.records import Transition

TINY = [
    "--set",
    "model.layers=1",
    "--set",
    "model.d_model=32",
    "--set",
    "model.heads=2",
    "--set",
    "model.max_positions=384",
    "--set",
    "dream.group_size=2",
    "--set",
    "dream.horizon=2",
    "--set",
    "trainer.infonce_weight=0",
    "--set",
    "stream.batch_trajectories=4",
    "--set",
    "trainer.wm_batch=2",
]
OBS = [
    Observation(
        'Enter "Kiera" and press Submit.', "u", '[1] textbox "Name"\n[2] button "Submit"', next_id=3
    ),
    Observation("Click OK.", "u", '[4] button "OK"\n[5] link "Help"\n[6] text "hello"', next_id=7),
]


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture
def starts(tmp_path):
    f = tmp_path / "starts.jsonl"
    f.write_text(
        "".join(
            json.dumps({"task": f"t{i}", "seed": 0, "obs": o.to_dict()}) + "\n"
            for i, o in enumerate(OBS)
        )
    )
    return str(f)


def test_bench_dream_json(tmp_path, starts, capsys):
    assert (
        main(
            [
                "bench",
                "dream",
                "--json",
                "--starts",
                starts,
                "--wm-tokens",
                "8",
                "--home",
                str(tmp_path),
                *TINY,
            ]
        )
        == 0
    )
    res = _last_json(capsys)
    for k in (
        "dream_steps_per_s_b1",
        "dream_steps_per_s_b16",
        "policy_tokens_per_s",
        "prompt_tokens_p95",
    ):
        assert res[k] > 0, k


def test_bench_train_json(tmp_path, starts, capsys):
    assert (
        main(["bench", "train", "--json", "--starts", starts, "--home", str(tmp_path), *TINY]) == 0
    )
    res = _last_json(capsys)
    for k in (
        "policy_trajectories_per_s",
        "world_model_transitions_per_s",
        "peak_rss_mib",
        "policy_candidates_per_step",
        "policy_candidate_rows_per_step",
        "policy_single_action_s_per_batch",
    ):
        assert res[k] > 0, k
    # both tokenizers side by side: tokens per transition and throughput each, and the ratio
    assert res["tokenizer"] == "bpe" and set(res["tokenizers"]) == {"bpe", "byte"}
    for t in res["tokenizers"].values():
        for k in (
            "policy_tokens_per_transition",
            "world_model_tokens_per_transition",
            "policy_trajectories_per_s",
            "world_model_transitions_per_s",
            "policy_tokens_per_transition_full",
        ):
            assert t[k] > 0, k
    assert res["tokenizers"]["bpe"]["vocab"] == 2048 and res["tokenizers"]["byte"]["vocab"] == 384
    assert (
        res["tokens_per_transition_ratio"]["policy_tokens_per_transition_full"] > 2
    )  # bytes / BPE
    assert res["tokens_per_transition_ratio"]["world_model_tokens_per_transition_full"] > 2


def _transitions(n_eps: int = 4) -> list[Transition]:
    out = []
    for e in range(n_eps):
        o = OBS[e % 2]
        nxt = Observation(o.instruction, "u", o.tree + '\n[9] text "Thanks"', next_id=10)
        out.append(
            Transition(
                run_id="r",
                episode_id=f"ep{e}",
                step=0,
                task="t",
                seed=0,
                source="real",
                policy_version=0,
                world_model_version=0,
                obs=o.to_dict(),
                action="click(2)",
                next_obs=nxt.to_dict(),
                reward=float(e % 2),
                done=bool(e % 2),
            )
        )
    return out


def test_eval_world_model_json(tmp_path, capsys):
    from core.config import ModelConfig
    from models.lm.saved import make_model
    from models.world_model.model import WorldModel

    model, tok = make_model(
        WorldModel, ModelConfig(layers=1, d_model=32, heads=2, max_positions=384)
    )
    model.save_pretrained(tmp_path / "wm")
    tok.save_pretrained(tmp_path / "wm")
    data = tmp_path / "eval.jsonl"
    data.write_text("".join(json.dumps(asdict(t)) + "\n" for t in _transitions()))
    argv = [
        "eval",
        "world-model",
        "--json",
        "--checkpoint",
        str(tmp_path / "wm"),
        "--data",
        str(data),
        "--split",
        "all",
        "--home",
        str(tmp_path),
        "--set",
        "dream.max_change_tokens=16",
    ]
    assert main(argv) == 0
    res = _last_json(capsys)
    for k in ("exact_match", "change_f1", "reward_bal_acc", "done_bal_acc", "ok_rate"):
        assert 0.0 <= res[k] <= 1.0 and 0.0 <= res.get("baseline_" + k, 0.0) <= 1.0, k
    assert res["n"] == 4 and res["episodes"] == 4
    assert res["baseline_exact_match"] == 0.0 and res["baseline_reward_bal_acc"] == 0.5


def test_eval_policy_refuses_training_seeds(tmp_path, capsys):
    rc = main(
        [
            "eval",
            "policy",
            "--checkpoint",
            str(tmp_path),
            "--tasks",
            "click-button",
            "--seeds",
            "10:20",
            "--home",
            str(tmp_path),
        ]
    )
    assert rc == 2
    assert "overlap the training seeds" in capsys.readouterr().err


def test_wilson_and_dream_summary():
    from evaluation.eval.policy import dream_summary, wilson

    lo, hi = wilson(8, 10)
    assert 0.49 < lo < 0.5 and 0.94 < hi < 0.95  # the textbook value (0.490, 0.943)
    assert wilson(0, 0) == (0.0, 1.0)

    def d(ep, g, r, v=3, task="t"):
        return Transition(
            run_id="r",
            episode_id=ep,
            step=0,
            task=task,
            seed=0,
            source="dream",
            policy_version=v,
            world_model_version=0,
            obs={"instruction": "", "tree": ""},
            action="click(1)",
            next_obs={"instruction": "", "tree": ""},
            reward=r,
            done=True,
            group_id=g,
        )

    s = dream_summary(
        [
            d("a", "g1", 1.0),
            d("b", "g1", 0.0),
            d("c", "g2", 0.0),
            d("e", "g2", 0.0),
            d("f", "g3", 1.0, v=4),
        ]
    )
    assert (
        s[3]["rollouts"] == 4
        and s[3]["success_rate"] == 0.25
        and s[3]["nonzero_advantage_share"] == 0.5
    )
    assert s[4]["tasks"]["t"]["success_rate"] == 1.0
