"""A study is stated before it runs, checkably: the checks of
``evaluation.studies.sample_efficiency.protocol`` against a real git checkout."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from evaluation.studies.sample_efficiency import protocol as p
from evaluation.studies.sample_efficiency.arms import experiment_id, resolve_experiment
from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig
from tests.factories import git_checkout

STATEMENT = "docs/statement.md"


def _commit(repo, name, text, msg="change"):
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", name], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", msg], check=True)


def test_a_clean_checkout_with_a_committed_statement_is_recorded(tmp_path):
    repo = git_checkout(tmp_path / "repo")
    rec = p.preregistration(STATEMENT, tmp_path / "out", repo)
    head = p.git(repo, "rev-parse", "HEAD")
    assert rec["commit"] == head and rec["statement_commit"] == head
    assert rec["statement"] == STATEMENT and len(rec["statement_sha256"]) == 64


def test_a_dirty_tree_is_refused_and_named(tmp_path):
    repo = git_checkout(tmp_path / "repo")
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(p.PreregistrationError, match="code.py"):
        p.preregistration(STATEMENT, tmp_path / "out", repo)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "new.py").write_text("")  # untracked, not ignored: dirty too
    with pytest.raises(p.PreregistrationError, match="new.py"):
        p.preregistration(STATEMENT, tmp_path / "out", repo)


def test_the_output_folder_inside_the_checkout_does_not_count_as_dirty(tmp_path):
    repo = git_checkout(tmp_path / "repo")
    out = repo / "docs" / "results" / "study"
    (out / "cells").mkdir(parents=True)
    (out / "cells" / "real_only-s0.json").write_text("{}")
    assert p.preregistration(STATEMENT, out, repo)["commit"]


def test_a_statement_that_is_missing_uncommitted_or_changed_is_refused(tmp_path):
    repo = git_checkout(tmp_path / "repo")
    with pytest.raises(p.PreregistrationError, match="needs its statement"):
        p.preregistration("", tmp_path / "out", repo)
    with pytest.raises(p.PreregistrationError, match="no such file"):
        p.preregistration("docs/other.md", tmp_path / "out", repo)
    (repo / STATEMENT).write_text("# Statement, edited after the fact\n")
    with pytest.raises(p.PreregistrationError):
        p.preregistration(STATEMENT, tmp_path / "out", repo)


def test_the_statement_commit_is_the_one_that_last_changed_it(tmp_path):
    repo = git_checkout(tmp_path / "repo")
    stated = p.git(repo, "rev-parse", "HEAD")
    _commit(repo, "code.py", "x = 3\n")
    rec = p.preregistration(STATEMENT, tmp_path / "out", repo)
    assert rec["statement_commit"] == stated != rec["commit"]


def test_a_resumed_study_runs_the_code_it_started_with(tmp_path):
    repo = git_checkout(tmp_path / "repo")
    out = repo / "docs" / "results" / "study"
    first = p.preregistration(STATEMENT, out, repo)
    _commit(repo, "docs/results/study/cells/imitation-s0.json", "{}", "a finished cell")
    p.check_resume(first, p.preregistration(STATEMENT, out, repo), out, repo)  # cells only: fine
    _commit(repo, "code.py", "x = 4\n")
    with pytest.raises(p.PreregistrationError, match="code.py"):
        p.check_resume(first, p.preregistration(STATEMENT, out, repo), out, repo)


def test_a_resumed_study_keeps_its_statement(tmp_path):
    repo = git_checkout(tmp_path / "repo")
    first = p.preregistration(STATEMENT, tmp_path / "out", repo)
    _commit(repo, STATEMENT, "# Statement, rewritten\n")
    with pytest.raises(p.PreregistrationError, match="statement"):
        p.check_resume(first, p.preregistration(STATEMENT, tmp_path / "out", repo), tmp_path, repo)


def test_the_study_records_its_commits_and_statement_in_experiment_json(tmp_path):
    from evaluation.studies.sample_efficiency.study import SampleEfficiency

    repo = git_checkout(tmp_path / "repo")
    cfg = SampleEfficiencyConfig()
    cfg.experiment.statement = STATEMENT
    out = tmp_path / "out"
    se = SampleEfficiency(cfg, out, start_stack=False, echo=False)
    se.repo = repo
    se._check_out()
    meta = json.loads((out / "experiment.json").read_text())
    head = p.git(repo, "rev-parse", "HEAD")
    assert meta["statement_commit"] == head
    assert meta["preregistration"]["commits"] == [head]
    assert meta["preregistration"]["checked"] is True
    _commit(repo, "code.py", "x = 5\n")  # the code moves on: the study refuses to resume
    se2 = SampleEfficiency(cfg, out, start_stack=False, echo=False)
    se2.repo = repo
    with pytest.raises(p.PreregistrationError, match="Resume from that commit"):
        se2._check_out()


def test_the_statement_and_the_report_only_settings_keep_the_experiment_id():
    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, False)
    ex2 = dataclasses.replace(ex, statement="docs/x.md", apart_tasks=["miniwob/click-tab"])
    assert experiment_id(ex2) == experiment_id(ex)
    assert experiment_id(dataclasses.replace(ex, instruction_match=True)) == experiment_id(ex)
    assert experiment_id(dataclasses.replace(ex, instruction_match=False)) != experiment_id(ex)


def test_corpus_tasks_must_be_disjoint_from_the_evaluated_tasks():
    cfg = SampleEfficiencyConfig()
    cfg.experiment.wm_corpus = "docs/results/world-model/transitions.jsonl.gz"
    cfg.experiment.corpus_tasks = ["miniwob/click-link", "miniwob/enter-text"]
    with pytest.raises(ValueError, match="disjoint"):
        resolve_experiment(cfg, False)
    cfg.experiment.corpus_tasks = ["miniwob/enter-text"]
    assert resolve_experiment(cfg, False).corpus_tasks == ["miniwob/enter-text"]
    cfg.experiment.wm_corpus = ""
    with pytest.raises(ValueError, match="wm_corpus"):
        resolve_experiment(cfg, False)


def test_the_instruction_switch_reaches_every_arms_model():
    from evaluation.studies.sample_efficiency.arm_names import ARMS
    from evaluation.studies.sample_efficiency.arms import cell_config

    cfg = SampleEfficiencyConfig()
    cfg.experiment.instruction_match = False
    ex = resolve_experiment(cfg, False)
    for arm in ARMS:
        assert cell_config(cfg, ex, "r", arm, 0, init_from="i:1").model.instruction_match is False


def test_tasks_apart_keeps_click_link_out_of_the_others_mean():
    per_task = {
        "real_only": {"miniwob/click-link": 0.9, "miniwob/click-tab": 0.4, "miniwob/a": 0.2},
        "imitation": {"miniwob/click-link": 0.5},
    }
    got = p.tasks_apart(per_task, ["miniwob/click-link"])
    assert got["real_only"] == {"miniwob/click-link": 0.9, "mean_others": 0.3}
    assert got["imitation"] == {"miniwob/click-link": 0.5, "mean_others": None}


def test_the_protocol_object_names_the_study_s_design():
    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, False)
    got = p.protocol(ex, {"statement_commit": "abc", "commit": "def"}, "task_seed")
    for key in ("tasks", "corpus_tasks", "seeds", "policy_pointer", "instruction_match",
                "wm_split", "statement_commit"):  # fmt: skip
        assert key in got
    assert got["statement_commit"] == "abc" and got["wm_split"] == "task_seed"
