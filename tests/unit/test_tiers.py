"""The test tiers: every test carries the marker of its folder (tests/conftest.py), so ``-m unit``
selects exactly tests/unit and ``-m "not unit"`` the rest; and the test modules share helpers
through tests/factories.py, tests/support.py and conftest.py files, never by importing one
another."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TIERS = ("unit", "integration", "e2e", "faults")

# Loaded into the pytest run below: the selected and the deselected tests with their tier markers.
PROBE = """
import json, os

TIERS = {tiers!r}
deselected = []


def pytest_deselected(items):
    deselected.extend(items)


def pytest_collection_finish(session):
    def tiers(item):
        return sorted({{m.name for m in item.iter_markers() if m.name in TIERS}})

    out = {{
        "selected": {{i.nodeid: tiers(i) for i in session.items}},
        "deselected": {{i.nodeid: tiers(i) for i in deselected}},
    }}
    with open(os.environ["TIERS_PROBE_OUT"], "w") as fh:
        json.dump(out, fh)
"""


def test_minus_m_unit_selects_exactly_the_unit_folder_and_every_test_has_its_tier(tmp_path):
    (tmp_path / "tiers_probe.py").write_text(PROBE.format(tiers=TIERS))
    out = tmp_path / "collected.json"
    env = {
        **os.environ,
        "TIERS_PROBE_OUT": str(out),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "unit"]
    cmd += ["-p", "tiers_probe", "-p", "no:cacheprovider", "tests"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())
    selected, deselected = got["selected"], got["deselected"]
    everything = {**selected, **deselected}
    assert len(everything) == len(selected) + len(deselected)
    assert selected and all(n.startswith("tests/unit/") for n in selected)
    assert not [n for n in deselected if n.startswith("tests/unit/")]
    # each test carries exactly the marker of its folder, so -m integration (e2e, faults) selects
    # exactly that folder too
    wrong = {n: t for n, t in everything.items() if t != [n.split("/")[1]]}
    assert not wrong, list(wrong.items())[:10]
    assert {n.split("/")[1] for n in everything} == set(TIERS)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _imports(path: Path, tree: ast.Module) -> list[tuple[str, str | None]]:
    """(module, name) of every import of the file; name is None for ``import module``."""
    out: list[tuple[str, str | None]] = []
    package = _module(path).rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(p for p in (base, node.module or "") if p)
            out += [(mod, a.name) for a in node.names]
    return out


def _is_fixture(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Attribute) and d.attr == "fixture":
            return True
        if isinstance(d, ast.Name) and d.id == "fixture":
            return True
    return False


def test_no_test_module_imports_another_and_no_fixture_is_imported():
    files = sorted(TESTS.rglob("*.py"))
    trees = {_module(p): (p, ast.parse(p.read_text(), filename=str(p))) for p in files}
    fixtures = {
        mod: {n.name for n in ast.walk(t) if isinstance(n, ast.FunctionDef) and _is_fixture(n)}
        for mod, (_, t) in trees.items()
    }
    bad = []
    for path, tree in trees.values():
        for src, name in _imports(path, tree):
            target = f"{src}.{name}" if name and f"{src}.{name}" in trees else src
            where = path.relative_to(ROOT)
            if target.rsplit(".", 1)[-1].startswith("test_"):
                bad.append(f"{where}: imports the test module {target}")
            elif name in fixtures.get(src, ()):
                bad.append(
                    f"{where}: imports the fixture {name} from {src} (share fixtures through conftest.py)"
                )
    assert not bad, "\n".join(bad)
