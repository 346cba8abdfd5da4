"""The offline tokenizers shared by the policy and the world model (``model.tokenizer``).

``"bpe"`` (default): a byte-level BPE trained on the project's own text, shipped in
``models/assets/tokenizer-bpe`` (``tokenizer.json`` + ``tokenizer_config.json``, a
``transformers`` fast tokenizer, 2,048 ids).  Trained by ``dynaweb tokenizer train``
(``models/tokenizer_train.py``, deterministic) on the committed corpus
``models/assets/tokenizer-corpus.jsonl.gz``: 4,389 real MiniWoB transitions (the
scripted experts on the 67 tasks that have one, the random policy on all 130)
rendered into exactly what the models read and write: policy prompts (instruction,
accessibility tree, focus, error, history), action texts, world-model prompts and
change scripts (``why:`` line, edit ops, ``reward``/``done``).

* Digits are pre-tokenized one by one, so ids and numbers are compositional
  (``click(12)`` = ``click(`` ``1`` ``2`` ``)``; ``click(1`` is a token prefix of
  ``click(12``, which the policy's candidate trie shares); other merges stay within
  white-space-delimited chunks.  Byte level underneath (nothing is unknown), no
  normalizer and a byte-level decoder, so ``decode(encode(s)) == s`` for every
  string (any language, any quoting): action text and change scripts decode to
  precisely what the model wrote.
* ids 0/1/2 = ``<pad>``/``</s>``/``<unk>``, as the byte tokenizer's.  Special-token
  strings in text stay text (``split_special_tokens``): a page showing ``</s>``
  never becomes eos.  ``clean_up_tokenization_spaces`` is off.
* 3.3x fewer tokens per transition than the byte tokenizer on the corpus's held-out
  episodes (209 against 693: ``dynaweb tokenizer stats``; the vocabulary size is the
  one with the lowest model cost per transition, docs/method.md "Tokenizer", docs/results/tokenizer/README.md).

``"byte"``: ``transformers.ByT5Tokenizer()`` -- no files at all (ids 0/1/2 =
pad/eos/unk, 3..258 = the 256 UTF-8 bytes, then 125 unused ``<extra_id_n>``;
``len == 384``), token count == UTF-8 byte count.

Both ``save_pretrained`` into a checkpoint directory and come back with
``load_tokenizer(dir)`` (``AutoTokenizer``, local files only), so a checkpoint
carries its tokenizer; a user's pretrained model directory brings its own.  All
code in ``models/`` only relies on ``encode``/``decode``/``eos_id``/``pad_id``
below; prompt budgets (``max_positions``, ``DreamConfig.max_change_tokens``) are in
tokens of whichever tokenizer the model has, while the collector's
``obs_token_budget`` truncates a MiniWoB tree in UTF-8 bytes (= byte-tokenizer tokens) and
``app_obs_tokens`` an app page's tree in tokens of ``model.tokenizer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from models.lm.types import Tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer as Backend

KINDS = ("bpe", "byte")
BPE_DIR = Path(__file__).resolve().parents[1] / "assets" / "tokenizer-bpe"


def build_tokenizer(kind: str = "bpe") -> Tokenizer:
    """A fresh tokenizer of ``kind`` (``model.tokenizer``): ``"bpe"`` (the shipped BPE) or
    ``"byte"`` (ByT5, no files).  No network."""
    if kind == "byte":
        from transformers import ByT5Tokenizer

        return ByT5Tokenizer()
    if kind == "bpe":
        return load_tokenizer(str(BPE_DIR))
    raise ValueError(f"model.tokenizer must be one of {', '.join(KINDS)}, got {kind!r}")


def load_tokenizer(path: str = "", gguf_file: str | None = None) -> Tokenizer:
    """``AutoTokenizer.from_pretrained(path)`` (local only), or ``build_tokenizer()`` for ''.

    Makes sure a pad token exists (falls back to eos) so batching works, and that
    special-token strings in raw text are encoded as text (fast tokenizers).
    """
    if not path:
        return build_tokenizer()
    from transformers import AutoTokenizer

    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(
        path, local_files_only=True, trust_remote_code=False, **extra
    )
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if _backend(tok) is not None:
        tok.split_special_tokens = True  # also for calls of the tokenizer itself
        _split_backend(tok)
    return tok


def _byte_offset(tokenizer: Tokenizer) -> int | None:
    """ByT5 maps byte b to id b + offset (3); None for any other tokenizer."""
    off = getattr(tokenizer, "offset", None)
    if type(tokenizer).__name__ == "ByT5Tokenizer" and isinstance(off, int):
        return off
    return None


def _backend(tokenizer: Tokenizer) -> Backend | None:
    """The ``tokenizers.Tokenizer`` of a fast tokenizer (None for a Python one)."""
    return (
        getattr(tokenizer, "backend_tokenizer", None)
        if getattr(tokenizer, "is_fast", False)
        else None
    )


def _split_backend(tokenizer: Tokenizer) -> Backend | None:
    """The backend with ``encode_special_tokens`` on (a call of the tokenizer itself may have reset it
    to the tokenizer's ``split_special_tokens``), or None."""
    backend = _backend(tokenizer)
    if backend is not None and not backend.encode_special_tokens:
        backend.encode_special_tokens = True
    return backend


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (no eos appended).

    Page text that happens to contain ``</s>`` or ``<extra_id_0>`` stays text: the
    byte tokenizer encodes plain UTF-8 bytes (+offset), a fast tokenizer runs its
    backend with ``encode_special_tokens`` on.
    """
    off = _byte_offset(tokenizer)
    if off is not None:
        return [b + off for b in text.encode("utf-8")]
    backend = _split_backend(tokenizer)
    if backend is not None:
        return backend.encode(text, add_special_tokens=False).ids
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids)


def count_tokens(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    """``[len(encode(tokenizer, t)) for t in texts]``, batched where the tokenizer allows."""
    if _byte_offset(tokenizer) is not None:
        return [len(t.encode("utf-8")) for t in texts]
    backend = _split_backend(tokenizer)
    if backend is not None and len(texts) > 1:
        return [len(e.ids) for e in backend.encode_batch(list(texts), add_special_tokens=False)]
    return [len(encode(tokenizer, t)) for t in texts]


def decode(tokenizer: Tokenizer, ids: list[int]) -> str:
    """Text of generated ids, special tokens (pad/eos/unk/extra) skipped, no space clean-up."""
    off = _byte_offset(tokenizer)
    if off is not None:
        return bytes(i - off for i in ids if off <= i < off + 256).decode("utf-8", errors="replace")
    backend = _backend(tokenizer)
    if backend is not None:
        return backend.decode([int(i) for i in ids], skip_special_tokens=True)
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def eos_id(tokenizer: Tokenizer) -> int:
    return int(tokenizer.eos_token_id)


def pad_id(tokenizer: Tokenizer) -> int:
    p = tokenizer.pad_token_id
    return int(p if p is not None else tokenizer.eos_token_id)
