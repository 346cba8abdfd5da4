"""Each study's configuration class: the runtime ``Config`` and the study's own section, loaded
by ``dynaweb experiment STUDY`` and ``dynaweb config --study STUDY`` (imported when used, so
``dynaweb --help`` stays fast)."""

from __future__ import annotations

import importlib

from core.config import Config

STUDY_CONFIGS = {
    "sample-efficiency": "evaluation.studies.sample_efficiency.config:SampleEfficiencyConfig",
    "world-model": "evaluation.studies.world_model.config:WorldModelStudyRunConfig",
}


def study_config_class(study: str | None) -> type[Config]:
    """The config class of ``study`` (``STUDY_CONFIGS``), or the runtime ``Config`` for none."""
    if not study:
        return Config
    module, _, name = STUDY_CONFIGS[study].partition(":")
    return getattr(importlib.import_module(module), name)
