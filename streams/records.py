"""The one home for message schemas.

Every record is JSON (UTF-8) with a ``type`` and a ``schema`` version.  Readers
accept the current and the previous version (``SUPPORTED``), so a newer
collector joining an older system is not dead-lettered.  ``decode`` validates
and raises ``RecordError`` with the reason; callers route the original bytes
to the dead-letter topic (see ``streams.kafka.DeadLetters``).

The dataclasses below are the schema: their annotations (``msgspec`` reads them:
``Literal`` values, ``Meta`` bounds, ``X | None`` where null is accepted, ``Any``
where a field is not checked) define encoding, decoding and validation at once.
``decode`` parses, type-checks and builds a record in one pass of msgspec's C
decoder (``_FAST``); a message it refuses is parsed again by the lenient path
(``json.loads``: it also reads ``NaN``/``Infinity``, which the standard library
writes, and a previous-version record) to name the dead-letter reason:
``empty``, ``oversize``, ``not_json``, ``wrong_type``, ``unknown_type``,
``unexpected_type``, ``schema_version``, ``missing_field`` (absent or null),
``bad_value`` (e.g. an unknown ``source``, a negative ``step``).  ``encode`` is
msgspec's encoder: plain JSON, fields in declaration order, non-ASCII as UTF-8;
a non-finite float is written as ``null`` (JSON has no NaN).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal

import msgspec

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

Source = Literal[SOURCES]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
NonEmptyList = Annotated[list, msgspec.Meta(min_length=1)]


def asdict_step(t: Any) -> dict:
    """A deep copy of transition ``t`` as a dict, without its ``next_obs`` (None)."""
    return dataclasses.asdict(dataclasses.replace(t, next_obs=None))


def _check_obs(o: dict, name: str) -> None:
    """An observation must carry its instruction and page tree (other keys are free)."""
    if not (isinstance(o.get("instruction"), str) and isinstance(o.get("tree"), str)):
        k = "instruction" if not isinstance(o.get("instruction"), str) else "tree"
        raise RecordError("wrong_type", f"{name}.{k} must be a string")


def _reason(e: msgspec.ValidationError) -> str:
    """The dead-letter reason of a msgspec validation error."""
    m = str(e)
    if m.startswith("Object missing required field") or "got `null`" in m:
        return "missing_field"
    if m.startswith("Expected `") and ", got `" in m:
        return "wrong_type"
    return "bad_value"  # a Literal, a bound, a length, a number out of range


# --- records -----------------------------------------------------------------


@dataclass
class Transition:
    run_id: str
    episode_id: str
    step: NonNegative
    task: str
    seed: int
    source: Source
    policy_version: int
    world_model_version: int  # absent in schema 1: read as 0
    obs: dict  # with string "instruction" and "tree" (``_check_obs``)
    action: str
    # None only on the steps of a policy batch's trajectories (``Trajectory.from_transitions``
    # with ``next_obs=False``): the policy never reads the next page, and the world model
    # reads whole transitions from its own topics
    next_obs: dict | None
    reward: float
    done: bool
    truncated: bool | None = False
    created_at: float | None = field(default_factory=now)
    producer_id: Any = ""
    group_id: str | None = ""
    behaviour_logprob: float | None = None
    action_tokens: Any = 0
    info: Any = field(default_factory=dict)
    candidates_hash: str | None = (
        ""  # models.policy.candidates.candidates_hash of the set the action was drawn from ("" = none)
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
        if d.get("schema") == 1:  # v1 had no world-model version, group or logprob
            d.setdefault("world_model_version", 0)
        return _convert(Transition, d)

    def _checked(self) -> Transition:
        if self.next_obs is None:
            raise RecordError("missing_field", "next_obs is required on a transition")
        _check_obs(self.obs, "obs")
        _check_obs(self.next_obs, "next_obs")
        return self

    @staticmethod
    def validate_step(d: dict) -> Transition:
        """A step of a trajectory: as ``validate``, except that ``next_obs`` may be None (a
        policy batch's steps carry none)."""
        if d.get("schema") == 1:
            d.setdefault("world_model_version", 0)
        return _convert(Transition, d, check=Transition._checked_step)

    def _checked_step(self) -> Transition:
        if self.next_obs is None:
            _check_obs(self.obs, "obs")
            return self
        return self._checked()


@dataclass
class Trajectory:
    """An assembled episode (or a dream rollout); ``transitions`` are in step order."""

    run_id: str
    episode_id: str
    source: str
    task: str
    seed: int
    policy_version: int
    world_model_version: Any  # absent: read as 0
    transitions: NonEmptyList  # Transition dicts
    reward: float
    truncated: Any = False
    group_id: Any = ""
    created_at: Any = field(default_factory=now)
    last_produced_at: Any = 0.0
    type: str = "trajectory"
    schema: int = SCHEMA

    @staticmethod
    def from_transitions(
        ts: list[Transition], truncated: bool = False, *, deep: bool = True, next_obs: bool = True
    ) -> Trajectory:
        """The episode of ``ts`` (any order).  ``deep``: the steps are deep copies
        (``dataclasses.asdict``); ``deep=False``, the stream worker's hot path, makes shallow
        copies (``asdict`` deep-copies every observation: 2x slower).  ``next_obs=False``: the
        steps carry ``next_obs`` None, as in a policy batch (the policy learns from each step's
        page, action and reward; each page is also the next step's ``obs``): half the bytes
        the stream worker encodes, compresses and sends, and the trainer fetches and decodes."""
        ts = sorted(ts, key=lambda t: t.step)
        last = ts[-1]
        if not next_obs:
            steps = [
                asdict_step(t) if deep else {**vars(t), "next_obs": None} for t in ts
            ]  # fmt: skip
        else:
            steps = [dataclasses.asdict(t) if deep else dict(vars(t)) for t in ts]
        return Trajectory(
            run_id=last.run_id,
            episode_id=last.episode_id,
            source=last.source,
            task=last.task,
            seed=last.seed,
            policy_version=min(t.policy_version for t in ts),
            world_model_version=min(t.world_model_version for t in ts),
            transitions=steps,
            reward=float(last.reward),
            truncated=bool(truncated or last.truncated or not last.done),
            group_id=last.group_id,
            last_produced_at=max(t.created_at for t in ts),
        )

    def steps(self) -> list[Transition]:
        return [Transition.validate_step(dict(t)) for t in self.transitions]

    @staticmethod
    def validate(d: dict) -> Trajectory:
        d.setdefault("world_model_version", 0)
        return _convert(Trajectory, d)


@dataclass
class TrainingBatch:
    """One policy training batch; the mix is decided by the stream worker alone."""

    run_id: str
    batch_id: str
    worker_id: str
    kind: Literal["mixed", "expert_only"]
    trajectories: list  # Trajectory dicts
    expert_fraction: float
    latest_policy_version: Any = 0
    created_at: Any = field(default_factory=now)
    type: str = "training_batch"
    schema: int = SCHEMA

    def trajs(self) -> list[Trajectory]:
        return [Trajectory.validate(dict(t)) for t in self.trajectories]

    @staticmethod
    def validate(d: dict) -> TrainingBatch:
        return _convert(TrainingBatch, d)


@dataclass
class CheckpointAnnouncement:
    """Notifies that ``kind``/``version`` exists in S3 (S3 is the truth)."""

    run_id: str
    kind: str  # "policy" | "world_model"
    version: int
    uri: str
    manifest_sha256: str
    created_at: Any = field(default_factory=now)
    type: str = "checkpoint"
    schema: int = SCHEMA

    @staticmethod
    def validate(d: dict) -> CheckpointAnnouncement:
        return _convert(CheckpointAnnouncement, d)


@dataclass
class Control:
    """Control-plane message: back-pressure (``rate``) and sentinels."""

    run_id: str
    kind: str  # "backpressure" | "sentinel" | "heartbeat"
    sender: str
    value: Any = 0.0
    info: Any = field(default_factory=dict)
    created_at: Any = field(default_factory=now)
    type: str = "control"
    schema: int = SCHEMA

    @staticmethod
    def validate(d: dict) -> Control:
        return _convert(Control, d)


RECORD_TYPES = {
    "transition": Transition,
    "trajectory": Trajectory,
    "training_batch": TrainingBatch,
    "checkpoint": CheckpointAnnouncement,
    "control": Control,
}


def _convert(cls: type, d: dict, check: Any = None) -> Any:
    """``d`` (already parsed) as a ``cls`` record, validated against its annotations and then by
    ``check`` (an unbound method; default: the record's own ``_checked``, where it has one)."""
    try:
        rec = msgspec.convert(d, cls)
    except msgspec.ValidationError as e:
        raise RecordError(_reason(e), str(e).replace("`", "'")[:200]) from None
    rec.schema = SCHEMA
    check = check or getattr(cls, "_checked", None)
    return rec if check is None else check(rec)


def _wire(cls: type, tag: str) -> type:
    """A copy of the dataclass ``cls`` for the fast decoder: the same fields, but ``type`` must
    be ``tag`` and ``schema`` one of ``SUPPORTED`` (required: a record without them is refused)."""
    spec: list[tuple] = []
    for f in fields(cls):
        if f.name == "type":
            spec.append(("type", Literal[tag], field(kw_only=True)))
        elif f.name == "schema":
            spec.append(("schema", Literal[SUPPORTED], field(kw_only=True)))
        elif f.default_factory is not dataclasses.MISSING:
            spec.append((f.name, f.type, field(default_factory=f.default_factory)))
        elif f.default is not dataclasses.MISSING:
            spec.append((f.name, f.type, field(default=f.default)))
        else:
            spec.append((f.name, f.type))
    return dataclasses.make_dataclass(
        f"_Wire{cls.__name__}", spec, namespace={"__module__": __name__}
    )


# decoders of a record whose type the caller expects (the stream worker's hot path)
_FAST = {tag: msgspec.json.Decoder(_wire(cls, tag)) for tag, cls in RECORD_TYPES.items()}


def _enc_hook(obj: Any) -> Any:
    """What msgspec does not encode itself but ``json.dumps`` did: subclasses of float, int,
    str (numpy scalars among them), and objects with ``item()``/``tolist()`` (numpy)."""
    for base in (bool, int, float, str):
        if isinstance(obj, base):
            return base(obj)
    for name in ("tolist", "item"):
        if callable(getattr(obj, name, None)):
            return getattr(obj, name)()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def encode(rec: Any) -> bytes:
    """``rec`` (a record, or a dict/list of plain values) as JSON bytes."""
    return _ENCODER.encode(rec)


def decode(raw: bytes | str | None, expect: str | None = None, max_bytes: int = MAX_BYTES) -> Any:
    """Decode and validate; raises RecordError(reason) on any problem."""
    if raw is None:
        raise RecordError("empty", "message has no value")
    if len(raw) > max_bytes:
        raise RecordError("oversize", f"{len(raw)} bytes > limit {max_bytes}")
    fast = _FAST.get(expect) if expect else None
    if fast is not None:
        try:
            rec = fast.decode(raw)
        except msgspec.DecodeError:
            pass  # refused: the lenient path below names the reason (or accepts it)
        else:
            rec.__class__ = RECORD_TYPES[expect]  # the same fields: a _wire copy
            rec.schema = SCHEMA
            checked = getattr(rec, "_checked", None)
            return rec if checked is None else checked()
    return _decode_lenient(raw, expect)


def _decode_lenient(raw: bytes | str, expect: str | None) -> Any:
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
    return RECORD_TYPES[typ].validate(d)
