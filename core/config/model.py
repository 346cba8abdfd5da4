"""The ``model`` configuration section (``ModelConfig``): the policy's and the world model's
architecture, tokenizer and optional parts.  Composed into ``core.config.runtime.Config`` like every
other section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.config.fields import _f


@dataclass
class ModelConfig:
    layers: int = _f(4, "Transformer layers (policy and world model, from config).")
    d_model: int = _f(256, "Hidden size.")
    heads: int = _f(4, "Attention heads.")
    max_positions: int = _f(1024, "Context length (tokens).")
    policy_path: str = _f("", "Local Hugging Face directory for the policy (empty = from config).")
    world_model_path: str = _f(
        "", "Local Hugging Face directory for the world model (empty = from config)."
    )
    seed: int = _f(0, "Initialisation seed.")
    wm_match_feature: bool = _f(
        True,
        "World model built from config: add a learned vector to the input embedding of every page "
        "or action token that is part of a word also in the task instruction (models/lm/match.py). "
        "A model loaded from a directory keeps what it was saved with.",
    )
    wm_head_lines: bool = _f(
        True,
        "World model built from config: its reward, done and change heads also read a learned "
        "projection (zero at init) of the mean over the page lines that hold a word of the "
        "instruction (models/world_model/lines.py). A model loaded from a directory keeps what it was saved with.",
    )
    wm_head_counts: bool = _f(
        True,
        "With wm_head_lines: the heads also read sums of per-line maxima over the named and the "
        "other page lines, i.e. counts (models/world_model/lines.py). A loaded model keeps its own.",
    )
    wm_head_acted: bool = _f(
        True,
        "With wm_head_lines: the heads also read the element-wise max over the acted element's "
        "page line (models/world_model/lines.py). A loaded model keeps its own.",
    )
    policy_match_feature: bool = _f(
        False,
        "Policy built from config: add a learned vector to the input embedding of every page "
        "token that is part of a word also in the task instruction, as the world model's "
        "wm_match_feature, up to the 'Action:' line (models/lm/match.py). A loaded policy keeps "
        "what it was saved with.",
    )
    policy_pointer: bool = _f(
        True,
        "Policy built from config: add to the score of every candidate action that names a page "
        "element a learned read-out of that element's page line (the element-wise max of the last "
        "layer's states, and whether the line holds a word of the instruction; "
        "models/policy/element_head.py; zero at init). A loaded policy keeps what it was saved with. The "
        "sample-efficiency study sets it from experiment.policy_pointer (off: the frozen study).",
    )
    tokenizer: Literal["bpe", "byte"] = _f(
        "bpe",
        "Tokenizer of models built from config: 'bpe' (byte-level BPE, 2,048 ids, trained on the "
        "project's own pages, actions and change scripts, shipped in models/assets/tokenizer-bpe; ~3.3x fewer "
        "tokens than 'byte') or 'byte' (ByT5, one token per UTF-8 byte). A model loaded from a directory "
        "(policy_path, world_model_path, checkpoints) always uses the tokenizer saved with it.",
    )
