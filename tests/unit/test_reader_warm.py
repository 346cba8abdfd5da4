"""A reader imports the loaders' libraries before its first checkpoint exists (models/checkpoints/reader.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_slot_warms_the_imports_its_first_load_needs() -> None:
    """In a fresh process (nothing of transformers imported yet), making a slot starts the
    warm-up; it ends with the default architecture and both loaders imported, before any
    checkpoint is downloaded."""
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        import models.checkpoints.reader as R
        assert "transformers.models.gpt_neo.modeling_gpt_neo" not in sys.modules
        assert not R._WARM.is_set()
        R.ModelSlot(store=None, kind="policy", work=Path("."), run="r")
        assert R._WARM.wait(120), "the warm-up did not finish"
        for m in ("transformers.models.gpt_neo.modeling_gpt_neo", "models.policy.runner",
                  "models.world_model.runner"):
            assert m in sys.modules, m
        R.ModelSlot(store=None, kind="world_model", work=Path("."), run="r")
        assert R._WARM_STARTED.locked()  # started once per process, by the first slot
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
