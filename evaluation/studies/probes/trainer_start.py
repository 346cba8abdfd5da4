"""A probe (docs/results/performance/README.md, "The SmolLM2 loop's first updates"): where a fresh
trainer's start goes before its first update, with a config's models (default
``configs/smollm2.yaml``): the imports, each model, both DeepSpeed engines, saving each model's
``hf/`` folder as version 0 does, and the policy engine's DeepSpeed state (which version 0 no longer
writes: before an update it holds nothing but the weights).  Nothing is uploaded.  Run from the
repository root: ``python -m evaluation.studies.probes.trainer_start [CONFIG]``; one JSON line of
seconds per phase.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    marks: dict[str, float] = {}
    t = [time.perf_counter()]

    def mark(what: str) -> None:
        now = time.perf_counter()
        marks[what] = round(now - t[0], 2)
        t[0] = now

    import deepspeed  # noqa: F401 - timed: what the trainer imports first
    import torch  # noqa: F401
    import transformers  # noqa: F401

    mark("import torch, transformers, deepspeed")
    from core.config import load_config
    from models.checkpoints.writer import save_engine_state
    from models.lm.saved import make_model
    from models.policy.model import Policy
    from models.train.learner import Learner
    from models.world_model.model import WorldModel

    mark("import the trainer's modules")
    cfg = load_config(sys.argv[1] if len(sys.argv) > 1 else "configs/smollm2.yaml", env={})
    pol = make_model(Policy, cfg.model)
    mark("policy model")
    wm = make_model(WorldModel, cfg.model)
    mark("world model")
    embedder = None
    if cfg.trainer.infonce_weight > 0:
        from models.lm.embedder import default_embedder

        embedder = default_embedder()
        mark("InfoNCE embedder")
    lrn = Learner(cfg.trainer, cfg.model, cfg.dream.max_change_tokens, "probe", None, embedder)
    lrn.start(pol, wm)
    mark("both DeepSpeed engines")
    out = Path(tempfile.mkdtemp(prefix="dynaweb-trainer-start-"))
    try:
        lrn.p_engine.module.save_pretrained(str(out / "policy"))
        pol[1].save_pretrained(str(out / "policy"))
        mark("save the policy's hf/")
        lrn.w_engine.module.save_pretrained(str(out / "world_model"))
        wm[1].save_pretrained(str(out / "world_model"))
        mark("save the world model's hf/")
        save_engine_state(lrn.p_engine, str(out / "policy-state"))
        mark("the policy engine's DeepSpeed state")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(marks))


if __name__ == "__main__":
    main()
