"""The configuration: ``Config`` (the runtime configuration every component reads, one section
per component), ``load_config`` (defaults, a config file, ``DYNAWEB_<SECTION>__<FIELD>``
environment variables and overrides, then ``Config.validate``), ``apply_overrides`` and
``describe`` (the reference ``dynaweb config --describe`` prints).

The modules: ``runtime`` (``Config`` and its loading), ``sections`` (the runtime sections),
``model`` (``ModelConfig``), ``dream`` (``DreamConfig``), ``trainer`` (``TrainerConfig``) and
``fields`` (how a field is declared, typed and bounded).  The
studies' sections live with the studies (``evaluation.studies.*.config``) and compose with
``Config`` by subclassing it."""

from core.config.dream import DreamConfig
from core.config.model import ModelConfig
from core.config.runtime import SECRETS, Config, apply_overrides, describe, load_config
from core.config.sections import (
    CollectorConfig,
    GateConfig,
    KafkaConfig,
    S3Config,
    StackConfig,
    StreamConfig,
    UpConfig,
)
from core.config.trainer import TrainerConfig

__all__ = [
    "SECRETS",
    "CollectorConfig",
    "Config",
    "DreamConfig",
    "GateConfig",
    "KafkaConfig",
    "ModelConfig",
    "S3Config",
    "StackConfig",
    "StreamConfig",
    "TrainerConfig",
    "UpConfig",
    "apply_overrides",
    "describe",
    "load_config",
]
