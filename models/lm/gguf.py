"""A GGUF model converted once and shared: the dequantised model as a plain Hugging Face directory
in a cache that every process of every run reads.

Reading a GGUF file means dequantising every tensor (tens of seconds for SmolLM2-135M on two
cores) and building the model twice (the reader's quantisation-aware model, then a plain one of
its class).  ``converted(path)`` does that once per file and transformers version: the plain
model and its tokenizer are saved (safetensors) to ``<cache>/<sha256 of the file>-<transformers
version>/``, written into a temporary folder and renamed into place under a file lock, so
processes that start together convert once and the others wait and read the result.  A folder
without its completion marker is never read.

The cache is ``$DYNAWEB_MODEL_CACHE``, else ``$XDG_CACHE_HOME/dynaweb/models``, else
``~/.cache/dynaweb/models``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

DONE = "dynaweb-converted.txt"  # written last: the folder is complete
FORMAT = "plain2"  # the converted copy's layout (a new one never reads an older copy)


def cache_root() -> Path:
    if os.environ.get("DYNAWEB_MODEL_CACHE"):
        return Path(os.environ["DYNAWEB_MODEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dynaweb" / "models"


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def cache_dir(path: str) -> Path:
    import transformers

    return (
        cache_root() / f"{file_sha256(path)[:24]}-transformers-{transformers.__version__}-{FORMAT}"
    )


def converted(path: str, convert) -> str:
    """The Hugging Face directory of the GGUF file ``path``, made by ``convert(path) -> (model,
    tokenizer)`` the first time (by whichever process takes the lock first) and read from the
    cache afterwards."""
    out = cache_dir(path)
    if (out / DONE).exists():
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process converting: wait for it
        if (out / DONE).exists():
            return str(out)
        hf_model, tok = convert(path)
        # the reader's config names the GGUF quantisation; the converted copy is plain float32 and
        # must load as a plain model (a model loaded as quantised refuses save_pretrained)
        config = getattr(hf_model, "config", None)
        if getattr(config, "quantization_config", None) is not None:
            del config.quantization_config
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            hf_model.save_pretrained(str(tmp), safe_serialization=True)
            tok.save_pretrained(str(tmp))
            (tmp / DONE).write_text(f"{os.path.abspath(path)}\n")
            if out.exists():  # an incomplete folder from a process that died mid-write
                shutil.rmtree(out)
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return str(out)
