"""The one home for message schemas.

Every record is JSON (UTF-8) with a ``type`` and a ``schema`` version.  Readers
accept the current and the previous version (``SUPPORTED``), so a newer
collector joining an older system is not dead-lettered.  ``decode`` validates
and raises ``RecordError`` with the reason; callers route the original bytes
to the dead-letter topic (see ``streams.kafka.DeadLetters``).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA = 2
SUPPORTED = (1, 2)
SOURCES = ("real", "expert", "dream")
MAX_BYTES = 4 * 1024 * 1024


class RecordError(ValueError):
    """A message that fails validation; ``reason`` is a short machine-readable kind."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def new_id() -> str:
    return uuid.uuid4().hex


def now() -> float:
    return time.time()


def heldout(episode_id: str, fraction: float) -> bool:
    """Stable per-episode split: the same episode always lands on the same side (held out when
    the first 8 bytes of sha1(episode_id), as a fraction of 2**64, are below ``fraction``)."""
    if fraction <= 0:
        return False
    h = int.from_bytes(hashlib.sha1(episode_id.encode()).digest()[:8], "big") / 2**64
    return h < fraction


# --- field checking ----------------------------------------------------------

_TYPES: dict[str, tuple] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "dict": (dict,),
    "list": (list,),
}


def _check(d: dict, name: str, kind: str, optional: bool = False) -> Any:
    if name not in d or d[name] is None:
        if optional:
            return None
        raise RecordError("missing_field", f"field {name!r} is required")
    v = d[name]
    ok = isinstance(v, _TYPES[kind]) and not (kind in ("int", "float") and isinstance(v, bool))
    if not ok:
        raise RecordError("wrong_type", f"field {name!r} must be {kind}, got {type(v).__name__}")
    return v


def _check_obs(d: dict, name: str) -> dict:
    o = _check(d, name, "dict")
    for k in ("instruction", "tree"):
        if not isinstance(o.get(k), str):
            raise RecordError("wrong_type", f"{name}.{k} must be a string")
    return o


# --- records -----------------------------------------------------------------


@dataclass
class Transition:
    run_id: str
    episode_id: str
    step: int
    task: str
    seed: int
    source: str
    policy_version: int
    world_model_version: int
    obs: dict
    action: str
    next_obs: dict
    reward: float
    done: bool
    truncated: bool = False
    created_at: float = field(default_factory=now)
    producer_id: str = ""
    group_id: str = ""
    behaviour_logprob: float | None = None
    action_tokens: int = 0
    info: dict = field(default_factory=dict)
    candidates_hash: str = (
        ""  # models.candidates.candidates_hash of the set the action was drawn from ("" = none)
    )
    type: str = "transition"
    schema: int = SCHEMA

    @property
    def key(self) -> tuple[str, int]:
        return (self.episode_id, self.step)

    @property
    def final(self) -> bool:
        return bool(self.done or self.truncated)

    @staticmethod
    def validate(d: dict) -> Transition:
        for name, kind in (
            ("run_id", "str"),
            ("episode_id", "str"),
            ("step", "int"),
            ("task", "str"),
            ("seed", "int"),
            ("source", "str"),
            ("policy_version", "int"),
            ("action", "str"),
            ("reward", "float"),
            ("done", "bool"),
        ):
            _check(d, name, kind)
        if d["source"] not in SOURCES:
            raise RecordError("bad_value", f"source must be one of {SOURCES}, got {d['source']!r}")
        if d["step"] < 0:
            raise RecordError("bad_value", f"step must be >= 0, got {d['step']}")
        _check_obs(d, "obs")
        _check_obs(d, "next_obs")
        if d.get("schema") == 1:  # v1 had no world-model version, group or logprob
            d.setdefault("world_model_version", 0)
        _check(d, "world_model_version", "int")
        _check(d, "truncated", "bool", optional=True)
        _check(d, "created_at", "float", optional=True)
        _check(d, "behaviour_logprob", "float", optional=True)
        _check(d, "group_id", "str", optional=True)
        _check(d, "candidates_hash", "str", optional=True)
        return _build(Transition, d)


@dataclass
class Trajectory:
    """An assembled episode (or a dream rollout); ``transitions`` are in step order."""

    run_id: str
    episode_id: str
    source: str
    task: str
    seed: int
    policy_version: int
    world_model_version: int
    transitions: list
    reward: float
    truncated: bool = False
    group_id: str = ""
    created_at: float = field(default_factory=now)
    last_produced_at: float = 0.0
    type: str = "trajectory"
    schema: int = SCHEMA

    @staticmethod
    def from_transitions(
        ts: list[Transition], truncated: bool = False, *, deep: bool = True
    ) -> Trajectory:
        """The episode of ``ts`` (any order).  ``deep``: the steps are deep copies
        (``dataclasses.asdict``); ``deep=False``, the stream worker's hot path, makes shallow
        copies (``asdict`` deep-copies every observation: 2x slower)."""
        ts = sorted(ts, key=lambda t: t.step)
        last = ts[-1]
        return Trajectory(
            run_id=last.run_id,
            episode_id=last.episode_id,
            source=last.source,
            task=last.task,
            seed=last.seed,
            policy_version=min(t.policy_version for t in ts),
            world_model_version=min(t.world_model_version for t in ts),
            transitions=[asdict(t) if deep else dict(vars(t)) for t in ts],
            reward=float(last.reward),
            truncated=bool(truncated or last.truncated or not last.done),
            group_id=last.group_id,
            last_produced_at=max(t.created_at for t in ts),
        )

    def steps(self) -> list[Transition]:
        return [Transition.validate(dict(t)) for t in self.transitions]

    @staticmethod
    def validate(d: dict) -> Trajectory:
        for name, kind in (
            ("run_id", "str"),
            ("episode_id", "str"),
            ("source", "str"),
            ("task", "str"),
            ("seed", "int"),
            ("policy_version", "int"),
            ("transitions", "list"),
            ("reward", "float"),
        ):
            _check(d, name, kind)
        d.setdefault("world_model_version", 0)
        if not d["transitions"]:
            raise RecordError("bad_value", "a trajectory needs at least one transition")
        return _build(Trajectory, d)


@dataclass
class TrainingBatch:
    """One policy training batch; the mix is decided by the stream worker alone."""

    run_id: str
    batch_id: str
    worker_id: str
    kind: str  # "mixed" | "expert_only"
    trajectories: list  # Trajectory dicts
    expert_fraction: float
    latest_policy_version: int = 0
    created_at: float = field(default_factory=now)
    type: str = "training_batch"
    schema: int = SCHEMA

    def trajs(self) -> list[Trajectory]:
        return [Trajectory.validate(dict(t)) for t in self.trajectories]

    @staticmethod
    def validate(d: dict) -> TrainingBatch:
        for name, kind in (
            ("run_id", "str"),
            ("batch_id", "str"),
            ("worker_id", "str"),
            ("kind", "str"),
            ("trajectories", "list"),
            ("expert_fraction", "float"),
        ):
            _check(d, name, kind)
        if d["kind"] not in ("mixed", "expert_only"):
            raise RecordError("bad_value", f"kind must be mixed or expert_only, got {d['kind']!r}")
        return _build(TrainingBatch, d)


@dataclass
class CheckpointAnnouncement:
    """Notifies that ``kind``/``version`` exists in S3 (S3 is the truth)."""

    run_id: str
    kind: str  # "policy" | "world_model"
    version: int
    uri: str
    manifest_sha256: str
    created_at: float = field(default_factory=now)
    type: str = "checkpoint"
    schema: int = SCHEMA

    @staticmethod
    def validate(d: dict) -> CheckpointAnnouncement:
        for name, kind in (
            ("run_id", "str"),
            ("kind", "str"),
            ("version", "int"),
            ("uri", "str"),
            ("manifest_sha256", "str"),
        ):
            _check(d, name, kind)
        return _build(CheckpointAnnouncement, d)


@dataclass
class Control:
    """Control-plane message: back-pressure (``rate``) and sentinels."""

    run_id: str
    kind: str  # "backpressure" | "sentinel" | "heartbeat"
    sender: str
    value: float = 0.0
    info: dict = field(default_factory=dict)
    created_at: float = field(default_factory=now)
    type: str = "control"
    schema: int = SCHEMA

    @staticmethod
    def validate(d: dict) -> Control:
        for name, kind in (("run_id", "str"), ("kind", "str"), ("sender", "str")):
            _check(d, name, kind)
        return _build(Control, d)


RECORD_TYPES = {
    "transition": Transition,
    "trajectory": Trajectory,
    "training_batch": TrainingBatch,
    "checkpoint": CheckpointAnnouncement,
    "control": Control,
}


_FIELD_NAMES: dict[type, frozenset] = {}


def _build(cls: type, d: dict) -> Any:
    names = _FIELD_NAMES.get(cls)
    if names is None:  # cached: ``fields()`` was a tenth of the stream worker's decode time
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    kwargs = {k: v for k, v in d.items() if k in names}
    kwargs["schema"] = SCHEMA
    return cls(**kwargs)


def encode(rec: Any) -> bytes:
    return json.dumps(asdict(rec), ensure_ascii=False, separators=(",", ":")).encode()


def decode(raw: bytes | str | None, expect: str | None = None, max_bytes: int = MAX_BYTES) -> Any:
    """Decode and validate; raises RecordError(reason) on any problem."""
    if raw is None:
        raise RecordError("empty", "message has no value")
    if len(raw) > max_bytes:
        raise RecordError("oversize", f"{len(raw)} bytes > limit {max_bytes}")
    try:
        d = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError("not_json", str(e)[:200]) from None
    if not isinstance(d, dict):
        raise RecordError("wrong_type", f"message must be a JSON object, got {type(d).__name__}")
    typ = d.get("type")
    if typ not in RECORD_TYPES:
        raise RecordError("unknown_type", f"type {typ!r} is not one of {sorted(RECORD_TYPES)}")
    if expect and typ != expect:
        raise RecordError("unexpected_type", f"expected {expect!r}, got {typ!r}")
    version = d.get("schema")
    if version not in SUPPORTED:
        raise RecordError("schema_version", f"schema {version!r} not in supported {SUPPORTED}")
    try:
        return RECORD_TYPES[typ].validate(d)
    except TypeError as e:  # unexpected constructor problem -> still a clear reason
        raise RecordError("bad_value", str(e)[:200]) from None
