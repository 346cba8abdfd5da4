"""Typed configuration for every component, composed in one place.

Resolution order (later wins): dataclass defaults, a YAML/JSON config file
(``--config`` or ``DYNAWEB_CONFIG``), environment variables of the form
``DYNAWEB_<SECTION>__<FIELD>`` (for example ``DYNAWEB_KAFKA__BOOTSTRAP=host:9092``),
then explicit overrides from the CLI; ``load_config`` then checks the result (``validate``).
Every field has a help string in its metadata; ``dynaweb config`` prints the resolved config.

A study composes its own section with this runtime config: a dataclass subclass of ``Config``
(``evaluation.studies.sample_efficiency.config.SampleEfficiencyConfig`` adds ``experiment``),
loaded by ``load_config(..., cls=...)`` from the same file, environment and overrides.  The
components a study starts get the runtime part only (``Config.runtime``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from core.config.fields import _f, check_value, coerce, hints, raise_problems
from core.config.fields import problems as field_problems
from core.config.model import ModelConfig
from core.config.sections import (
    CollectorConfig,
    DreamConfig,
    GateConfig,
    KafkaConfig,
    S3Config,
    StackConfig,
    StreamConfig,
    UpConfig,
)
from core.config.trainer import TrainerConfig

SECRETS = (("s3", "secret_key"), ("s3", "access_key"), ("kafka", "sasl_password"))


@dataclass
class Config:
    """The runtime configuration: what every component (collector, stream worker, trainer, dream
    generator, gate, the embedded stack) reads."""

    # the sections of the study configs that compose with this one, and the command of each: a
    # config file or environment variable for one of them is left to that study's config, an
    # explicit override of one is refused with the command it belongs to
    STUDY_SECTIONS: ClassVar[dict[str, str]] = {
        "experiment": "dynaweb experiment sample-efficiency",
        "wm_study": "dynaweb experiment world-model",
    }

    run_id: str = _f("default", "Run id; namespaces every topic and S3 prefix.")
    home: str = _f(".dynaweb", "State directory (data, logs, pids, credentials); env DYNAWEB_HOME.")
    threads: int = _f(1, "torch threads per component.", ge=1)
    metrics_port: int = _f(0, "Metrics port of this process (0 = pick a free one).", ge=0, le=65535)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    s3: S3Config = field(default_factory=S3Config)
    stack: StackConfig = field(default_factory=StackConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    dream: DreamConfig = field(default_factory=DreamConfig)
    up: UpConfig = field(default_factory=UpConfig)
    gate: GateConfig = field(default_factory=GateConfig)

    @property
    def home_path(self) -> Path:
        return Path(self.home).resolve()

    def runtime(self) -> Config:
        """A copy of the runtime part (a study config without its study section): what a
        component started by a study is given."""
        return Config(
            **{f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(Config)}
        )

    def to_dict(self, redact: bool = True, drop_secrets: bool = False) -> dict:
        """Resolved config; secrets are masked (or dropped, for a file a child process reads:
        children get secrets from the environment or the credentials file, never a config file)."""
        d = dataclasses.asdict(self)
        for sec, key in SECRETS:
            if drop_secrets:
                d[sec].pop(key)
            elif redact and d[sec][key]:
                d[sec][key] = "***"
        return d

    def checks(self) -> list[tuple[str, str]]:
        """The contradictions across sections (a section's own are its ``checks``)."""
        out = []
        m = self.model
        for name in ("layers", "d_model", "heads", "max_positions"):
            if getattr(m, name) < 1:
                out.append((f"model.{name}", f"{getattr(m, name)} must be >= 1"))
        if m.heads >= 1 and m.d_model % m.heads:
            out.append(("model.d_model", f"{m.d_model} is not a multiple of model.heads {m.heads}"))
        if not self.gate.checks() and (seeds := self.gate.seed_range()) is not None:
            c = self.collector
            if seeds.start < c.seed_stop and c.seed_start < seeds.stop:
                out.append(
                    (
                        "gate.seeds",
                        f"{self.gate.seeds} overlap the training seeds [{c.seed_start}, "
                        f"{c.seed_stop}) (collector.seed_start/seed_stop)",
                    )
                )
        return out

    def problems(self) -> list[str]:
        """Every value of the wrong type or out of bounds, and every contradiction between fields
        (``validate`` raises them)."""
        return field_problems(self)

    def validate(self) -> None:
        """ValueError naming every problem (``problems``); ``load_config`` calls it."""
        raise_problems(self)


C = TypeVar("C", bound=Config)


def _fields(obj: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(obj)}


def _section(cfg: Config, sec: str, key: str) -> Any:
    """The section ``sec`` of ``cfg``, or a ValueError naming the valid ones (and the command a
    study's section belongs to)."""
    sub = getattr(cfg, sec, None) if sec in _fields(cfg) else None
    if dataclasses.is_dataclass(sub):
        return sub
    if sec in cfg.STUDY_SECTIONS:
        raise ValueError(
            f"config key {key!r} is a setting of `{cfg.STUDY_SECTIONS[sec]}`, not of this command"
        )
    valid = ", ".join(
        f.name for f in dataclasses.fields(cfg) if dataclasses.is_dataclass(getattr(cfg, f.name))
    )
    raise ValueError(f"unknown config key {key!r}; sections: {valid}")


def _foreign(cfg: Config, sec: str) -> bool:
    """``sec`` is another study's section (``Config.STUDY_SECTIONS``), not one of ``cfg``'s."""
    return sec in cfg.STUDY_SECTIONS and sec not in _fields(cfg)


def apply_overrides(cfg: C, overrides: dict) -> C:
    """Apply a nested dict (from a file) or flat 'section.field' keys."""
    for key, value in overrides.items():
        scalar = key in _fields(cfg) and not dataclasses.is_dataclass(getattr(cfg, key))
        if isinstance(value, dict) and "." not in key and not scalar:
            sub = _section(cfg, key, key)
            for k2, v2 in value.items():
                _set(sub, k2, v2, f"{key}.{k2}")
        elif "." in key:
            sec, k2 = key.split(".", 1)
            _set(_section(cfg, sec, key), k2, value, key)
        else:
            _set(cfg, key, value, key)
    return cfg


def _set(obj: Any, name: str, value: Any, path: str) -> None:
    """Set field ``name`` of ``obj`` from text (``coerce``) or a value (``check_value``): a
    ValueError naming ``path`` for an unknown key or a value of the wrong type."""
    if name not in _fields(obj):
        valid = ", ".join(f.name for f in dataclasses.fields(obj))
        raise ValueError(f"unknown config key {path!r}; valid keys here: {valid}")
    hint = hints(type(obj))[name]
    value = coerce(value, hint, path) if isinstance(value, str) else check_value(value, hint, path)
    setattr(obj, name, value)


def load_config(
    path: str | None = None,
    overrides: dict | None = None,
    env: dict | None = None,
    cls: type[C] = Config,  # type: ignore[assignment]
) -> C:
    """A ``cls`` (``Config``, or a study's config) from its defaults, the config file, the
    environment and ``overrides``, validated.  A file's or the environment's section of another
    study (``Config.STUDY_SECTIONS``) is skipped: one file serves every command."""
    env = dict(os.environ if env is None else env)
    cfg = cls()
    path = path or env.get("DYNAWEB_CONFIG")
    if path:
        text = Path(path).read_text()
        if path.endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        apply_overrides(cfg, {k: v for k, v in data.items() if not _foreign(cfg, k)})
    if env.get("DYNAWEB_HOME"):
        cfg.home = env["DYNAWEB_HOME"]
    if env.get("DYNAWEB_RUN_ID"):
        cfg.run_id = env["DYNAWEB_RUN_ID"]
    flat = {}
    for k, v in env.items():
        if k.startswith("DYNAWEB_") and "__" in k:
            sec, name = k[len("DYNAWEB_") :].lower().split("__", 1)
            if not _foreign(cfg, sec):
                flat[f"{sec}.{name}"] = v
    apply_overrides(cfg, flat)
    if overrides:
        apply_overrides(cfg, overrides)
    cfg.validate()
    return cfg


def describe(cls: type = Config, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(key, default, help) for every field: the config reference."""
    out = []
    inst = cls()
    for f in dataclasses.fields(cls):
        val = getattr(inst, f.name)
        if dataclasses.is_dataclass(val):
            out.extend(describe(type(val), prefix + f.name + "."))
        else:
            out.append((prefix + f.name, val, f.metadata.get("help", "")))
    return out
