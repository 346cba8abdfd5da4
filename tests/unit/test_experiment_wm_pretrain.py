"""The sample-efficiency study's pretrained world model (``experiment.wm_corpus``) and its two
accountings of real steps: the pretraining on the committed corpus, where the DynaWeb arms' cells
start their world model (``trainer.wm_init_from``), and the headline (every real step, the corpus
included) against the online accounting."""

from __future__ import annotations

import json

import pytest

from core.config import Config
from evaluation.studies.sample_efficiency.arms import cell_config, experiment_id, resolve_experiment
from evaluation.studies.sample_efficiency.artifacts import markdown, write_all
from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig
from evaluation.studies.sample_efficiency.report import (
    aggregate,
    arm_summary,
    every_real_step,
    headline,
    rows_from_cells,
)
from evaluation.studies.sample_efficiency.wm import corpus_files, corpus_path, load_corpus, pretrain
from models.checkpoints.store import wm_init_dir
from models.lm.saved import load_model, make_model
from models.world_model.model import WorldModel
from models.world_model.runner import WorldModelRunner

CORPUS = "docs/results/world-model/transitions.jsonl.gz"


def test_the_id_of_a_study_without_a_corpus_is_unchanged_and_a_corpus_changes_it():
    ex = resolve_experiment(SampleEfficiencyConfig(), quick=False)
    base = experiment_id(ex)
    ex.wm_pretrain_steps = 17  # no corpus: the setting is not used, the id stays
    assert experiment_id(ex) == base
    ex.wm_corpus = CORPUS
    with_corpus = experiment_id(ex)
    assert with_corpus != base
    ex.wm_pretrain_steps = 18
    assert experiment_id(ex) != with_corpus


def test_only_the_dynaweb_arms_start_their_world_model_from_the_pretrained_one():
    ex = resolve_experiment(SampleEfficiencyConfig(), quick=False)
    for arm in ("imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only"):
        c = cell_config(Config(), ex, "r", arm, 0, init_from="imit:3", wm_init="/x/world_model")
        want = "/x/world_model" if arm.startswith("dynaweb") else ""
        assert c.trainer.wm_init_from == want, arm
    assert cell_config(Config(), ex, "r", "dynaweb", 0).trainer.wm_init_from == ""


def test_corpus_path_names_what_to_do_when_missing():
    assert corpus_path(CORPUS).is_file()  # relative to the repository
    with pytest.raises(FileNotFoundError, match="experiment world-model"):
        corpus_path("no/such/corpus.jsonl")
    trans = load_corpus(corpus_path(CORPUS), ["miniwob/click-tab"])
    assert trans and {t.task for t in trans} == {"miniwob/click-tab"}


def test_a_corpus_of_several_files_trains_on_all_of_them(tmp_path):
    more = "docs/results/world-model/transitions-checkboxes.jsonl.gz"
    assert corpus_files(f"{CORPUS}, {more}") == [corpus_path(CORPUS), corpus_path(more)]
    with pytest.raises(FileNotFoundError, match="no/such"):
        corpus_files(f"{CORPUS},no/such.jsonl")
    cfg = SampleEfficiencyConfig()
    ex = cfg.experiment
    ex.tasks = ["miniwob/click-checkboxes"]
    ex.layers, ex.d_model, ex.heads = 1, 32, 2
    ex.wm_pretrain_steps = 1
    ex.wm_corpus = f"{CORPUS},{more}"
    rec = pretrain(ex, cfg, tmp_path / "both", True, print)
    one = [len(load_corpus(corpus_path(f), ex.tasks)) for f in (CORPUS, more)]
    assert rec["real_transitions"] == sum(one) and min(one) > 0
    ex.wm_corpus = CORPUS
    alone = pretrain(ex, cfg, tmp_path / "one", True, print)
    assert alone["real_transitions"] == one[0] and alone["corpus_sha256"] != rec["corpus_sha256"]


def test_pretrain_trains_on_the_studys_tasks_saves_a_loadable_model_and_is_reused(tmp_path):
    cfg = SampleEfficiencyConfig()
    ex = cfg.experiment
    ex.tasks = ["miniwob/click-tab"]
    ex.layers, ex.d_model, ex.heads = 1, 32, 2
    ex.wm_pretrain_steps = 2
    assert pretrain(ex, cfg, tmp_path, True, print) is None  # no corpus: nothing to pretrain
    ex.wm_corpus = CORPUS
    said: list[str] = []
    rec = pretrain(ex, cfg, tmp_path, True, said.append)
    n = len(load_corpus(corpus_path(CORPUS), ex.tasks))
    assert rec["real_transitions"] == n > 0 and rec["per_task"] == {"miniwob/click-tab": n}
    assert rec["steps"] == 2 and len(rec["corpus_sha256"]) == 64
    assert json.loads((tmp_path / "world_model.json").read_text()) == rec
    d = wm_init_dir(rec["dir"])
    model, tok = load_model(WorldModel, str(d))
    assert model.config.num_layers == 1 and model.config.hidden_size == 32
    assert model.state.heads_trained and model.state.change_head_trained
    assert any("pretraining" in m for m in said)
    # a rerun with the same --out reuses it (nothing is trained again)
    said.clear()
    assert pretrain(ex, cfg, tmp_path, True, said.append) == rec and said == []


def test_wm_init_dir_refuses_a_directory_without_a_model(tmp_path):
    with pytest.raises(RuntimeError, match="wm_init_from.*config.json"):
        wm_init_dir(str(tmp_path))


def test_the_world_model_never_decodes_past_its_own_position_table():
    cfg = Config()
    cfg.model.layers, cfg.model.d_model, cfg.model.heads, cfg.model.max_positions = 1, 32, 2, 256
    from models.world_model.model import WorldModel

    model, tok = make_model(WorldModel, cfg.model)
    cfg.model.max_positions = 1024  # the run's setting is larger than the model's table
    assert WorldModelRunner(model, tok, cfg.dream, cfg.model.max_positions).max_positions == 256
    cfg.model.max_positions = 128
    assert WorldModelRunner(model, tok, cfg.dream, cfg.model.max_positions).max_positions == 128


def _cell(arm, seed, pts, offline=0):
    c = {
        "arm": arm,
        "seed": seed,
        "points": [
            {"budget": b, "version": v, "real_steps": s, "success": y, "episodes": 10}
            for b, v, s, y in pts
        ],
    }
    if offline:
        c["offline_real_steps"] = offline
    return c


def _cells(offline):
    cells = []
    for seed in (0, 1):
        cells.append(_cell("imitation", seed, [(None, 5, 50, 0.1)]))
        cells.append(_cell("real_only", seed, [(100, 3, 100, 0.2), (None, 9, 300, 0.4)]))
        cells.append(
            _cell("dynaweb", seed, [(100, 9, 100, 0.4), (None, 27, 150, 0.4)], offline=offline)
        )
    return cells


def test_the_headline_counts_the_corpus_and_the_online_accounting_does_not(tmp_path):
    cells = _cells(offline=1000)
    rows = rows_from_cells(cells)
    dyn = [r for r in rows if r["arm"] == "dynaweb" and r["seed"] == 0]
    assert [r["real_steps"] for r in dyn] == [50, 100, 150]  # online (the budget's count)
    assert {r["offline_real_steps"] for r in dyn} == {1000}
    assert {r["offline_real_steps"] for r in rows if r["arm"] != "dynaweb"} == {0}
    agg = aggregate(rows)
    online, every = headline(agg), headline(every_real_step(agg))
    # online: DynaWeb reaches real-only's 0.4 at 100 steps against 300
    assert online["ratios"]["dynaweb"] == pytest.approx(100 / 300)
    # every real step: 1,100 against 300 (real-only has no corpus)
    assert every["arms"]["dynaweb"]["steps_to_target"] == pytest.approx(1100.0)
    assert every["ratios"]["dynaweb"] == pytest.approx(1100 / 300)
    arms = arm_summary(cells, agg)
    d, r = arms["dynaweb"], arms["real_only"]
    assert (d["real_steps"], d["real_steps_online"], d["real_steps_offline"]) == (1150, 150, 1000)
    assert r["real_steps"] == r["real_steps_online"] == 300 and r["real_steps_offline"] == 0
    md = markdown(every_real_step(agg), every, {}, arms, online)
    assert "Online real steps only" in md and "0.33x" in md and "3.67x" in md
    s = write_all(cells, tmp_path, {"experiment_id": "t"})
    assert s["headline"]["ratio"] == pytest.approx(1100 / 300)
    assert s["headline_online"]["ratio"] == pytest.approx(100 / 300)
    # without a corpus the two accountings are the same and the section is left out
    plain = write_all(_cells(offline=0), tmp_path, {"experiment_id": "t"})
    assert plain["headline"] == plain["headline_online"]
    assert "Online real steps only" not in (tmp_path / "results.md").read_text()
