"""The project's BPE tokenizer: its corpus, its (deterministic) training, its measurement.

``dynaweb tokenizer corpus --out FILE``
    Collects the corpus in the live browser (``collectors.corpus.collect_corpus``:
    own task server, no broker): the scripted experts on every task that has one
    (67; 8 episodes each, seeds 0-7) and the random policy on all 130 MiniWoB tasks
    (6 episodes each, at most 8 steps), with ``collectors.collector.run_collector``
    as ``dynaweb experiment world-model`` does.  One transition per line (episode,
    step, task, source, obs, action, next_obs, reward, done), gzipped; this module
    reads it (``read_corpus``).  The committed corpus,
    ``models/assets/tokenizer-corpus.jsonl.gz`` (4,389 transitions, 213 kB), was
    made so (~11 min on 2 cores); a new collection is the same recipe, not the
    same bytes (page timing varies).

``dynaweb tokenizer train --out DIR [--corpus FILE] [--vocab-size N]``
    Renders every *training* transition of the corpus (episodes outside
    ``streams.records.heldout(episode_id, HELDOUT)``) into exactly the texts the
    models read and write -- the policy prompt (``models.lm.prompts.policy_prompt``:
    task, page tree, focus, error, history) + the action text, and the
    world-model prompt + its target (``models.world_model.outputs.change_target``: why
    line, change script, reward, done) -- and trains a byte-level BPE on them
    (``train_bpe``), saved with ``save_pretrained`` (what ``load_tokenizer(DIR)``
    reads).  The shipped tokenizer is ``models/assets/tokenizer-bpe`` and is the
    output of this command on the committed corpus with the defaults
    (``tests/unit/test_tokenizer.py`` retrains it and compares the files).

``dynaweb tokenizer stats [--corpus FILE] [--vocab-sizes 1024,2048,...] [--json]``
    Tokens per transition (policy prompt + action + eos, world-model prompt +
    target + eos; the texts in full, before any fitting to ``max_positions``) on
    the *held-out* episodes, for the byte tokenizer, the shipped BPE and BPEs of
    other vocabulary sizes trained on the same training episodes.

Training is deterministic: the texts come in corpus order and ``tokenizers``'
BPE trainer breaks ties between equally frequent pairs by the pair itself
(checked: the same ``tokenizer.json``, byte for byte, with ``RAYON_NUM_THREADS``
1 or 4 and with ``TOKENIZERS_PARALLELISM=false``; ~4 s on one core).
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

from models.lm.types import Tokenizer

ASSETS = Path(__file__).resolve().parent / "assets"
CORPUS = ASSETS / "tokenizer-corpus.jsonl.gz"
BPE_DIR = ASSETS / "tokenizer-bpe"
VOCAB_SIZE = 2048
HELDOUT = 0.2  # share of the corpus's episodes kept out of training (streams.records.heldout)
SPECIALS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2: the same as the byte tokenizer's
PRE_TOKENIZER = (
    r"\p{N}| ?[^\s\p{N}]+|\s+(?!\S)|\s+"  # a digit | a chunk up to white space | white space
)


# --- corpus (collected by collectors.corpus) -------------------------------------------


def read_corpus(path: Path | str = CORPUS) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(x) for x in fh if x.strip()]


def split_corpus(rows: list[dict], fraction: float = HELDOUT) -> tuple[list[dict], list[dict]]:
    """(train, held-out) by episode with the stream worker's rule."""
    from streams.records import heldout

    train, held = [], []
    for r in rows:
        (held if heldout(r["episode_id"], fraction) else train).append(r)
    return train, held


def transition_texts(rows: list[dict]) -> list[tuple[str, str, str, str]]:
    """Per transition: (policy prompt, action text, world-model prompt, world-model target), in full,
    with the episode's own action history (rows of an episode in step order)."""
    from core.spaces import Observation
    from models.lm.prompts import policy_prompt, world_model_prompt
    from models.world_model.outputs import change_target

    history: dict[str, list[tuple[int, str]]] = {}
    for r in rows:
        history.setdefault(r["episode_id"], []).append((int(r["step"]), r["action"]))
    out = []
    for r in rows:
        obs, nxt = Observation.from_dict(r["obs"]), Observation.from_dict(r["next_obs"])
        hist = [a for s, a in sorted(history[r["episode_id"]]) if s < int(r["step"])]
        out.append(
            (
                policy_prompt(obs, hist),
                r["action"],
                world_model_prompt(obs, r["action"]),
                change_target(obs, nxt, float(r["reward"]), bool(r["done"])),
            )
        )
    return out


def training_texts(rows: list[dict]) -> list[str]:
    """What the models read and write, as they are encoded: the prompts, the action text and the
    world-model target are separate strings (``encode(prompt) + encode(action) + [eos]``)."""
    return [s for texts in transition_texts(rows) for s in texts]


# --- training ----------------------------------------------------------------------------


def train_bpe(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Any:
    """A byte-level BPE (``tokenizers.Tokenizer``) trained on ``texts``.

    * pre-tokenizer (``PRE_TOKENIZER``): every digit on its own, so ids and numbers are
      compositional (``click(12)`` = ``click(`` ``1`` ``2`` ``)``, and ``click(1`` is a token
      prefix of ``click(12``, which the policy's candidate trie shares); otherwise chunks
      between white space (with one leading space) and runs of white space, so a merge may
      join letters and punctuation (``click(``, `` value="``, `` "Submit"``).  Measured
      against GPT-2's split (letters apart from punctuation) on the held-out corpus
      episodes at 2,048 ids: 3.32x fewer tokens than bytes against 2.82x (unseen tasks:
      2.88x against 2.51x);
    * then byte level (the 256 bytes are the base vocabulary: no unknown input); no
      normalizer, a ByteLevel decoder: ``decode(encode(s)) == s`` for every string;
    * ids 0/1/2 = ``<pad>``/``</s>``/``<unk>`` (as the byte tokenizer), then the 256 bytes,
      then the merges; ``</s>`` is appended by ``tokenizer(text)`` like ByT5 does.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKENIZER), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(texts, trainer=trainer, length=len(texts))
    eos = tk.token_to_id("</s>")
    tk.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos)]
    )
    return tk


def wrap(tk: Any) -> Any:
    """The ``tokenizers.Tokenizer`` as a transformers fast tokenizer (pad/eos/unk set; special-token
    strings in text stay text: ``split_special_tokens``; no clean-up of spaces on decode)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        split_special_tokens=True,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )


def train(
    out: Path | str,
    corpus: Path | str = CORPUS,
    vocab_size: int = VOCAB_SIZE,
    heldout_fraction: float = HELDOUT,
) -> dict:
    """Train on the corpus's training episodes and ``save_pretrained`` into ``out``."""
    rows = read_corpus(corpus)
    train_rows, held = split_corpus(rows, heldout_fraction)
    t0 = time.time()
    tok = wrap(train_bpe(training_texts(train_rows), vocab_size))
    secs = time.time() - t0
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    return {
        "out": str(out),
        "vocab_size": len(tok),
        "train_transitions": len(train_rows),
        "heldout_transitions": len(held),
        "seconds": round(secs, 2),
    }


# --- measurement -----------------------------------------------------------------------


def tokens_per_transition(tok: Tokenizer, texts: list[tuple[str, str, str, str]]) -> dict:
    """Mean tokens per transition (policy prompt + action + eos; world-model prompt + target + eos)."""
    from models.lm.tokenizer import encode

    pol = [len(encode(tok, p)) + len(encode(tok, a)) + 1 for p, a, _, _ in texts]
    wm = [len(encode(tok, w)) + len(encode(tok, t)) + 1 for _, _, w, t in texts]
    act = [len(encode(tok, a)) + 1 for _, a, _, _ in texts]
    tgt = [len(encode(tok, t)) + 1 for _, _, _, t in texts]
    n = max(1, len(texts))
    return {
        "policy": round(sum(pol) / n, 1),
        "world_model": round(sum(wm) / n, 1),
        "total": round((sum(pol) + sum(wm)) / n, 1),
        "action": round(sum(act) / n, 2),
        "wm_target": round(sum(tgt) / n, 1),
        "vocab": len(tok),
    }


def _mmacs(s: dict, layers: int, d_model: int) -> float:
    """Forward multiply-adds per transition (millions) of a GPT-Neo of ``layers`` x ``d_model`` with
    this vocabulary: tokens x (12 layers d^2 + vocab d); attention's length^2 term left out."""
    return round(s["total"] * (12 * layers * d_model**2 + s["vocab"] * d_model) / 1e6, 1)


def stats(
    corpus: Path | str = CORPUS,
    vocab_sizes: tuple = (512, 1024, 2048, 4096, 8192),
    heldout_fraction: float = HELDOUT,
    layers: int = 4,
    d_model: int = 256,
) -> dict:
    """Tokens per held-out transition: byte, the shipped BPE, and BPEs of ``vocab_sizes``; with the
    model cost per transition (``mmacs``, for ``layers`` x ``d_model``: more ids cost a bigger output
    layer for every token, fewer tokens cost less of everything)."""
    from models.lm.tokenizer import build_tokenizer

    rows = read_corpus(corpus)
    train_rows, held = split_corpus(rows, heldout_fraction)
    texts = transition_texts(held)
    res: dict = {"heldout_transitions": len(held), "train_transitions": len(train_rows)}
    byte = tokens_per_transition(build_tokenizer("byte"), texts)
    res["byte"] = byte
    res["bpe"] = tokens_per_transition(build_tokenizer("bpe"), texts)
    res["bpe"]["ratio_byte_over_bpe"] = round(byte["total"] / res["bpe"]["total"], 3)
    train_texts = training_texts(train_rows)
    sweep = {}
    for v in vocab_sizes:
        s = tokens_per_transition(wrap(train_bpe(train_texts, int(v))), texts)
        s["ratio_byte_over_bpe"] = round(byte["total"] / s["total"], 3)
        sweep[str(v)] = s
    res["sweep"] = sweep
    for s in [res["byte"], res["bpe"], *sweep.values()]:
        s["mmacs"] = _mmacs(s, layers, d_model)
    res["model"] = f"{layers}x{d_model}"
    return res
