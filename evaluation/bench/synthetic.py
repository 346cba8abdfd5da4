"""Training batches of the stream worker's shape, for the trainer benches and the reproducibility test:
``StreamConfig.batch_trajectories`` trajectories, ``expert_fraction`` of them expert, the rest one
dream group (half rewarded) with behaviour log-probs, ``DreamConfig.horizon`` steps each, over the
given start pages; and ``TrainerConfig.wm_batch`` real transitions for the world model."""

from __future__ import annotations

from typing import Any

from core.config import Config
from core.spaces import Observation


def synthetic_batch(cfg: Config, obs: list[Observation], k: int) -> tuple[list, list]:
    """(trajectories, world-model transitions) shaped like the stream worker's."""
    from models.policy.candidates import candidate_actions
    from streams.records import Trajectory, Transition

    n = cfg.stream.batch_trajectories
    G, H = cfg.stream.group_size, cfg.dream.horizon
    n_exp = int(round(n * cfg.stream.expert_fraction))

    def traj(o: Observation, source: str, ep: str, gid: str, reward: float, j: int) -> Any:
        cands = candidate_actions(o)
        steps = []
        for s in range(H):
            a = cands[(j + s) % len(cands)].to_text()
            nxt = {**o.to_dict(), "tree": o.tree + f'\n[{o.next_id + s}] text "step {s}"'}
            steps.append(
                Transition(
                    run_id="bench",
                    episode_id=ep,
                    step=s,
                    task="t",
                    seed=0,
                    source=source,
                    policy_version=0,
                    world_model_version=0,
                    obs=o.to_dict(),
                    action=a,
                    next_obs=nxt,
                    reward=reward if s == H - 1 else 0.0,
                    done=s == H - 1,
                    group_id=gid,
                    behaviour_logprob=None if source == "expert" else -12.0,
                    action_tokens=len(a) + 1,
                )
            )
        # a policy batch's steps carry no next page (the stream worker's, ``EpisodeAssembler``)
        return Trajectory.from_transitions(steps, next_obs=False), steps

    trajs, trans = [], []
    for i in range(n_exp):
        t, st = traj(obs[(k + i) % len(obs)], "expert", f"e{k}-{i}", "", 1.0, i)
        trajs.append(t)
        trans += st
    start = obs[(k + n_exp) % len(obs)]
    for i in range(n - n_exp):
        g = f"g{k}-{i // G}"
        t, _ = traj(start, "dream", f"d{k}-{i}", g, float(i % 2), i)
        trajs.append(t)
    i = n_exp
    while (
        len(trans) < cfg.trainer.wm_batch
    ):  # the world-model batch is real transitions, as many as asked
        trans += traj(obs[(k + i) % len(obs)], "expert", f"w{k}-{i}", "", 1.0, i)[1]
        i += 1
    return trajs, trans[: cfg.trainer.wm_batch]
