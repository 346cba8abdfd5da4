"""The offline tokenizer shared by the policy and the world model.

Choice: ``transformers.ByT5Tokenizer`` (byte level).

* It needs no vocabulary files and no hub access: ``ByT5Tokenizer()`` is complete
  (ids 0/1/2 = pad/eos/unk, ids 3..258 = the 256 UTF-8 bytes, then 125 unused
  ``<extra_id_n>`` tokens; ``len(tokenizer) == 384``).
* Every string round-trips exactly (any language, any quoting), so action text
  and change scripts decode to precisely what the model wrote.
* Token count == UTF-8 byte count (+ eos), which makes the prompt budget
  (``CollectorConfig.obs_token_budget``) and ``DreamConfig.max_change_tokens``
  predictable.
* ``save_pretrained`` writes ``tokenizer_config.json`` (+ ``added_tokens.json``) and
  ``AutoTokenizer.from_pretrained(dir)`` loads it back, so checkpoints carry their
  tokenizer like any Hugging Face model.

The cost is longer sequences than a BPE would give (about 3-4x for English),
acceptable for the small from-config models.  A user with a local pretrained
model directory gets that model's own tokenizer via ``load_tokenizer(dir)``;
all code in ``models/`` only relies on ``eos_token_id``/``pad_token_id`` and
``tokenizer(text, add_special_tokens=False).input_ids``.
"""

from __future__ import annotations

from typing import Any


def build_tokenizer() -> Any:
    """A fresh byte-level tokenizer (no files, no network)."""
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer()


def load_tokenizer(path: str = "") -> Any:
    """``AutoTokenizer.from_pretrained(path)`` (local only), or ``build_tokenizer()`` for ''.

    Makes sure a pad token exists (falls back to eos) so batching works.
    """
    if not path:
        return build_tokenizer()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _byte_offset(tokenizer: Any) -> int | None:
    """ByT5 maps byte b to id b + offset (3); None for any other tokenizer."""
    off = getattr(tokenizer, "offset", None)
    if type(tokenizer).__name__ == "ByT5Tokenizer" and isinstance(off, int):
        return off
    return None


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (no eos appended).

    For the byte tokenizer this is the plain UTF-8 bytes (+offset): fast, and page
    text that happens to contain ``</s>`` or ``<extra_id_0>`` stays text.
    """
    off = _byte_offset(tokenizer)
    if off is not None:
        return [b + off for b in text.encode("utf-8")]
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def decode(tokenizer: Any, ids: list[int]) -> str:
    """Text of generated ids, special tokens (pad/eos/unk/extra) skipped."""
    off = _byte_offset(tokenizer)
    if off is not None:
        return bytes(i - off for i in ids if off <= i < off + 256).decode("utf-8", errors="replace")
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def eos_id(tokenizer: Any) -> int:
    return int(tokenizer.eos_token_id)


def pad_id(tokenizer: Any) -> int:
    p = tokenizer.pad_token_id
    return int(p if p is not None else tokenizer.eos_token_id)
