"""The model a run's checkpoints were written for, against the one its configuration asks for.

Every manifest holds the resolved configuration it was written under (``config``,
``models.checkpoints.store.build_manifest``).  A run id whose stored checkpoints were written for
another model (backbone, sizes, tokenizer, LoRA base) than the configuration now asks for is
refused with ``ModelSpecMismatch``, which names both and the ways out, instead of silently going
on training and acting with the stored model: ``make run`` then ``make run UP_ARGS="--config
configs/smollm2.yaml"`` on the same run id used to resume the GPT-Neo checkpoint under a SmolLM2
configuration.  ``model.continue_stored`` continues the stored model on purpose.

Checked by ``dynaweb up`` before it starts anything (``check_run``), by the trainer when it
resumes, and by the readers (``ModelSlot`` of the dream generator and the ``latest`` collector
policy) on every checkpoint they load.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.config import ModelConfig

# a model on a base (``model.<kind>_path``): the base and its LoRA adapters; a model built from
# the configuration: its sizes and tokenizer
BASE_FIELDS = ("{kind}_path", "{kind}_lora_rank")
FROM_CONFIG_FIELDS = ("layers", "d_model", "heads", "max_positions", "tokenizer")
# parts of one kind's model, whatever it is built on
KIND_FIELDS = {"world_model": ("world_model_ensemble",)}
# settings added after checkpoints were written without them: what a stored configuration that
# does not name one had (so a run written before the world model's ensemble is refused under a
# configuration that asks for one, instead of resuming an optimizer state without its members)
ADDED = {"world_model_ensemble": 0}
KINDS = ("policy", "world_model")


class ModelSpecMismatch(RuntimeError):
    """A run's stored checkpoint was written for another model than the configuration asks for."""


def model_spec(model: dict, kind: str) -> dict[str, Any]:
    """The settings of the ``model`` section (a dict) that decide what ``kind``'s checkpoint is."""
    names = [f.format(kind=kind) for f in BASE_FIELDS] + list(KIND_FIELDS.get(kind, ()))
    if not model.get(f"{kind}_path"):
        names += FROM_CONFIG_FIELDS
    return {n: model.get(n, ADDED.get(n)) for n in names}


def spec_differences(stored: dict, wanted: dict, kind: str) -> dict[str, tuple[Any, Any]]:
    """``name -> (stored, configured)`` for every spec setting of ``kind`` that differs; a setting
    the stored configuration does not name (written by an older version) is not compared, but
    for those in ``ADDED`` (compared as their old value)."""
    have, want = model_spec(stored, kind), model_spec(wanted, kind)
    names = list(dict.fromkeys([*have, *want]))
    return {
        n: (have.get(n), want.get(n))
        for n in names
        if (n in stored or n in ADDED) and have.get(n) != want.get(n)
    }


def _model_dict(settings: ModelConfig | dict) -> dict:
    return dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)


def check_manifest(manifest: dict | None, settings: ModelConfig | dict, run: str = "") -> None:
    """Raise ``ModelSpecMismatch`` when ``manifest`` (of one kind and version) was written for
    another model than ``settings`` (the configuration's ``model`` section, a ``ModelConfig`` or its
    dict) ask for, unless ``model.continue_stored`` is set.  A manifest without a stored
    configuration is not judged."""
    wanted = _model_dict(settings)
    if wanted.get("continue_stored"):
        return
    stored = ((manifest or {}).get("config") or {}).get("model")
    if not isinstance(stored, dict):
        return
    kind, version = manifest.get("kind", "?"), manifest.get("version", "?")
    diff = spec_differences(stored, wanted, kind)
    if not diff:
        return
    run = run or manifest.get("run_id", "?")
    what = "; ".join(
        f"model.{n}: stored {have!r}, configured {want!r}" for n, (have, want) in diff.items()
    )
    raise ModelSpecMismatch(
        f"run {run!r} holds {kind} checkpoint v{version} written for another model than this "
        f"configuration asks for ({what}). Refusing to continue the stored model under this "
        "configuration. Either start a new run with its own id (--run-id NEW, or run_id in the "
        "config file, or DYNAWEB_RUN_ID), or continue the stored model on purpose with "
        "--set model.continue_stored=true (its stored spec then stays, whatever the "
        "configuration says)."
    )


def check_run(store: Any, settings: ModelConfig | dict) -> None:
    """``check_manifest`` on the version of each kind a start would resume (``LATEST``, else the
    newest written: a gated run's candidates) in ``store`` (a ``CheckpointStore``); nothing stored
    passes."""
    if _model_dict(settings).get("continue_stored"):
        return
    client = getattr(store, "client", None)
    if client is not None and not client.bucket_exists(store.bucket):
        return  # a new store: nothing written yet
    for kind in KINDS:
        entry = store.latest(kind) or store.newest(kind)
        if entry is None:
            continue
        manifest, _ = store.manifest(kind, int(entry["version"]))
        check_manifest(manifest, settings, store.run_id)
