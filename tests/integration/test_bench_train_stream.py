"""``dynaweb bench train --stream`` on the real stack: the trainer's own loop trains batches read
from the policy-batch topic (its offsets move past them) and both rates are measured in one run."""

import dataclasses

from evaluation.bench.train_stream import bench_train_stream


def _starts() -> list[dict]:
    out = []
    for i in range(3):
        tree = "\n".join(f'[{j}] button "B{i}-{j}"' for j in range(1, 5)) + '\n[5] textbox "name"'
        out.append(
            {
                "obs": {
                    "instruction": f"Click B{i}-2",
                    "url": "http://127.0.0.1/t",
                    "tree": tree,
                    "next_id": 6,
                }
            }
        )
    return out


def test_trainer_fed_by_the_topic_against_in_memory_batches(run_cfg):
    cfg = dataclasses.replace(
        run_cfg,
        model=dataclasses.replace(run_cfg.model, layers=1, d_model=64, heads=2),
        stream=dataclasses.replace(run_cfg.stream, batch_trajectories=4),
    )
    res = bench_train_stream(cfg, _starts(), steps=2, ahead=3)
    assert res["stream_batches_trained"] == 4  # warm-up + 2 measured intervals + 1
    # the trained batches were read from the topic: the committed offset is past each of them
    assert res["trainer_committed_offset"] >= res["stream_batches_trained"]
    assert res["stream_batches_published"] >= res["stream_batches_trained"]
    assert res["stream_policy_steps_per_s"] > 0 and res["memory_policy_steps_per_s"] > 0
    ratio = res["stream_policy_steps_per_s"] / res["memory_policy_steps_per_s"]
    assert abs(res["stream_over_synthetic"] - ratio) < 0.01
    assert res["trainer_idle_s"] >= 0
