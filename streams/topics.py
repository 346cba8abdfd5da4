"""Topic registry: every topic name and partition count, namespaced by run id."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopicSpec:
    suffix: str
    partitions: int | None  # None = the configured default
    help: str


SPECS: dict[str, TopicSpec] = {
    "real": TopicSpec("transitions.real", None, "Live transitions from policy/random collectors."),
    "expert": TopicSpec(
        "transitions.expert", None, "Expert transitions (scripted, demonstrations)."
    ),
    "dream": TopicSpec("transitions.dream", None, "Dreamed transitions from generators."),
    "policy_batches": TopicSpec("train.policy", 1, "Mixed training batches for the policy."),
    "world_model": TopicSpec("train.world_model", 1, "Real transitions for world-model training."),
    "world_model_eval": TopicSpec("eval.world_model", 1, "Held-out real transitions (by episode)."),
    "checkpoints": TopicSpec("checkpoints", 1, "Checkpoint announcements (S3 is the truth)."),
    "control": TopicSpec("control", 1, "Back-pressure and sentinel messages."),
    "collectors": TopicSpec("collectors", 1, "Collector announcements and heartbeats."),
    "deadletter": TopicSpec("deadletter", 1, "Invalid messages with reason and original bytes."),
    "probe": TopicSpec("probe", 1, "Numbered probe records of `dynaweb chaos` and tests/faults."),
}


class Topics:
    """Names for one run: ``dynaweb.<run_id>.<suffix>``."""

    def __init__(self, run_id: str, default_partitions: int = 2):
        if not run_id or any(
            c not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
            for c in run_id
        ):
            raise ValueError(f"run id {run_id!r} must be non-empty letters, digits, '-' or '_'")
        self.run_id = run_id
        self.default_partitions = default_partitions

    def name(self, key: str) -> str:
        return f"dynaweb.{self.run_id}.{SPECS[key].suffix}"

    def partitions(self, key: str) -> int:
        return SPECS[key].partitions or self.default_partitions

    def __getattr__(self, key: str) -> str:
        if key in SPECS:
            return self.name(key)
        raise AttributeError(key)

    def all(self) -> dict[str, str]:
        return {k: self.name(k) for k in SPECS}

    @property
    def transitions(self) -> list[str]:
        return [self.name("real"), self.name("expert"), self.name("dream")]
