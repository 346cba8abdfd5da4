"""Pre-registration of a study, checkably, and the protocol object of its summary.

A full study (not ``--quick``) runs only from a clean git checkout and only after its statement
(``experiment.statement``: the arms, tasks, seeds, primary contrast, expected effect and the seeds
that power needs) is committed there.  ``preregistration`` checks both and returns what the study
records in ``experiment.json``: the commit it runs from (``commit``), the statement's path, its
SHA-256 and the commit that last changed it (``statement_commit``).  A resumed study must run the
same code: ``check_resume`` refuses a checkout whose files differ from the recorded commit anywhere
but in the study's own output folder (where its cells are committed as they finish).

``protocol`` is the summary's ``protocol`` object; ``tasks_apart`` splits a per-task table into the
tasks a hand-written feature may decide alone (``experiment.apart_tasks``: click-link, where the
instruction-word bit singles out the target) and the mean of the others.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


class PreregistrationError(RuntimeError):
    """The study may not run from this checkout (dirty tree, statement not committed, code
    changed since the study started)."""


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` (stdout, stripped); a PreregistrationError naming the command when git
    fails or the folder is not a checkout."""
    try:
        r = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError as e:
        raise PreregistrationError("git is not installed: a study records its commit") from e
    if r.returncode != 0:
        raise PreregistrationError(f"`git {' '.join(args)}` in {repo}: {r.stderr.strip()}")
    return r.stdout.rstrip()  # (status lines start with a space)


def _inside(path: Path, folder: Path | None) -> bool:
    if folder is None:
        return False
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def dirty_paths(repo: Path, ignore: Path | None = None) -> list[str]:
    """Tracked files changed and untracked files not ignored by git, outside ``ignore`` (the
    study's output folder, when it lies inside the checkout)."""
    out = []
    for line in git(repo, "status", "--porcelain", "--untracked-files=all").splitlines():
        name = line[3:].split(" -> ")[-1].strip('"')
        if not _inside(repo / name, ignore):
            out.append(name)
    return out


def statement_record(repo: Path, statement: str) -> dict:
    """The committed statement: its path (relative to the checkout), SHA-256 and the commit that
    last changed it.  PreregistrationError when it is missing, not committed, or changed since."""
    path = (repo / statement) if not Path(statement).is_absolute() else Path(statement)
    if not path.is_file():
        raise PreregistrationError(
            f"experiment.statement={statement!r}: no such file. Write the study's statement "
            "(arms, tasks, seeds, primary contrast, expected effect, seeds needed), commit it, "
            "then run the study"
        )
    try:
        rel = path.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError as e:
        raise PreregistrationError(
            f"experiment.statement={statement!r} lies outside the checkout {repo}"
        ) from e
    commit = git(repo, "log", "-1", "--format=%H", "--", rel)
    if not commit:
        raise PreregistrationError(f"the statement {rel} is not committed: commit it first")
    if git(repo, "status", "--porcelain", "--", rel):
        raise PreregistrationError(f"the statement {rel} has changes that are not committed")
    return {
        "statement": rel,
        "statement_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "statement_commit": commit,
        "statement_commit_time": git(repo, "log", "-1", "--format=%cI", commit),
    }


def preregistration(statement: str, out: Path, repo: Path = REPO) -> dict:
    """Check that the study may run (a clean checkout, a committed statement) and return its
    record for ``experiment.json``: ``commit``, ``commit_time`` and ``statement_record``'s keys."""
    if not statement:
        raise PreregistrationError(
            "a full study needs its statement: --set experiment.statement=PATH (a committed file; "
            "docs/results/README.md says what it holds); --quick runs without one"
        )
    dirty = dirty_paths(repo, ignore=out)
    if dirty:
        shown = ", ".join(dirty[:8]) + (f" and {len(dirty) - 8} more" if len(dirty) > 8 else "")
        raise PreregistrationError(
            f"the checkout {repo} has changes that are not committed ({shown}): a study runs from "
            "a clean tree so that the commit it records is the code that ran"
        )
    head = git(repo, "rev-parse", "HEAD")
    return {
        "commit": head,
        "commit_time": git(repo, "log", "-1", "--format=%cI", head),
        **statement_record(repo, statement),
    }


def check_resume(recorded: dict, now: dict, out: Path, repo: Path = REPO) -> None:
    """A resumed study runs the code it started with: PreregistrationError when the statement
    changed or a file outside the output folder differs between the recorded commit and now."""
    for key in ("statement", "statement_sha256"):
        if recorded.get(key) and recorded[key] != now.get(key):
            raise PreregistrationError(
                f"{out} was started with {key}={recorded[key]!r}, now {now.get(key)!r}: a stated "
                "study keeps its statement; use a new --out for a new statement"
            )
    old = recorded.get("commit")
    if not old or old == now["commit"]:
        return
    changed = [
        f
        for f in git(repo, "diff", "--name-only", old, now["commit"]).splitlines()
        if f and not _inside(repo / f, out)
    ]
    if changed:
        shown = ", ".join(changed[:8]) + (
            f" and {len(changed) - 8} more" if len(changed) > 8 else ""
        )
        raise PreregistrationError(
            f"{out} was started at {old[:10]}; the checkout at {now['commit'][:10]} differs in "
            f"{shown}. Resume from that commit (git worktree add DIR {old[:10]})"
        )


def protocol(ex, record: dict | None, wm_split: str | None) -> dict:
    """The summary's ``protocol`` object (``ex``: the resolved ``ExperimentConfig``)."""
    record = record or {}
    return {
        "tasks": list(ex.tasks),
        "corpus_tasks": list(ex.corpus_tasks) or None,
        "seeds": list(ex.seeds),
        "arms": list(ex.arms),
        "policy_pointer": bool(ex.policy_pointer),
        "instruction_match": bool(ex.instruction_match),
        "wm_split": wm_split,
        "statement": record.get("statement"),
        "statement_commit": record.get("statement_commit"),
        "commit": record.get("commit"),
    }


def tasks_apart(per_task: dict[str, dict[str, float]], apart: list[str]) -> dict[str, dict]:
    """Per arm: the success of every task in ``apart`` and ``mean_others`` (the mean over the other
    tasks), from ``{arm: {task: success}}``; None where an arm has no other task."""
    out: dict[str, dict] = {}
    for arm, d in per_task.items():
        rest = [v for t, v in d.items() if t not in apart and isinstance(v, int | float)]
        row = {t: d.get(t) for t in apart if t in d}
        row["mean_others"] = round(sum(rest) / len(rest), 4) if rest else None
        out[arm] = row
    return out
