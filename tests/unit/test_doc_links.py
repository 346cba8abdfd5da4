"""The documentation points at things that exist.

Every relative Markdown link in README.md, CHANGELOG.md and docs/**/*.md resolves to a file or
folder of the repository; a link into a Python file names a symbol (``path.py#name`` or
``path.py#Class.method``) that the file defines, found with ``ast``; a link into a Markdown page
names one of its headings. Code spans that name a repository path (``models/lm/backbone.py``) or
a dotted module path (``models.lm.scoring.score_continuations``) must resolve the same way. The
README stays short, every page is reachable from it, and no page or code comment speaks of the
work sittings that produced it.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
README_MAX_LINES = 200
README_MAX_BYTES = 15_000
PACKAGES = ("core", "streams", "models", "collectors", "evaluation", "infra", "tests")
PATH_ROOTS = (*PACKAGES, "docs")

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
REPO_PATH = re.compile(rf"^(?:{'|'.join(PATH_ROOTS)})/[\w./-]*?(?:#[\w.]+|::\w+)?$")
DOTTED = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.\w+)+$")
SYMBOL = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
LINE_ANCHOR = re.compile(r"^L\d+(?:-L\d+)?$")
WORK_SITTING = re.compile(r"sessions? [0-9]", re.I)
SITTING_WORDS = re.compile(r"\bsessions?\b(?!\s*(?:timeout|_timeout))", re.I)


def pages() -> list[Path]:
    found = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    if CHANGELOG.exists():
        found.insert(1, CHANGELOG)
    return found


def prose(text: str) -> str:
    """The page without its fenced code blocks (a link or path shown as code is an example)."""
    return FENCE.sub("", text)


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(prose(page.read_text(encoding="utf-8")))]


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@functools.cache
def defined(path: Path) -> dict[str, set[str]]:
    """Top-level names a module defines or imports, and each class's members."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, set[str]] = {"": set()}

    def targets(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Name):
            return [node.id]
        if isinstance(node, ast.Tuple | ast.List):
            return [n for elt in node.elts for n in targets(elt)]
        return []

    def collect(body: list[ast.stmt], into: set[str]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                into.add(node.name)
            elif isinstance(node, ast.Assign):
                into.update(n for t in node.targets for n in targets(t))
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                into.update(targets(node.target))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                into.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.If | ast.Try):
                collect(node.body, into)
                collect(getattr(node, "orelse", []), into)

    collect(tree.body, names[""])
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            collect(node.body, names.setdefault(node.name, set()))
    return names


def symbol_error(path: Path, symbol: str) -> str | None:
    """Why ``symbol`` (``name`` or ``Class.member``) is not defined in ``path``, or None."""
    if not SYMBOL.match(symbol):
        return f"{symbol!r} is not a symbol name"
    parts = symbol.split(".")
    if len(parts) > 2:
        return f"{symbol!r}: name a top-level symbol or Class.member"
    names = defined(path)
    if parts[0] not in names[""]:
        return f"{rel(path)} defines no {parts[0]!r}"
    if len(parts) == 2 and parts[1] not in names.get(parts[0], set()):
        return f"{rel(path)}: class {parts[0]!r} has no member {parts[1]!r}"
    return None


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(page: Path) -> set[str]:
    return {
        slug(m.group(1))
        for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*$", prose(page.read_text("utf-8")), re.M)
    }


def target_error(page: Path, target: str) -> str | None:
    """Why a link ``target`` written in ``page`` does not resolve, or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
        return None
    path_part, _, fragment = target.partition("#")
    path = (page.parent / path_part).resolve() if path_part else page
    if not path.is_relative_to(ROOT):
        return f"{target!r} leaves the repository"
    if not path.exists():
        return f"{target!r}: no such file or folder"
    if not fragment:
        return None
    if path.suffix == ".py":
        if LINE_ANCHOR.match(fragment):
            return f"{target!r}: a line anchor drifts with every edit; link the symbol instead"
        return symbol_error(path, fragment)
    if path.suffix == ".md":
        return None if fragment in anchors(path) else f"{target!r}: no such heading"
    return f"{target!r}: an anchor into a file that is neither code nor Markdown"


def module_path(dotted: list[str]) -> tuple[Path | None, list[str]]:
    """The longest module prefix of a dotted name that is a file or package, and the rest."""
    for cut in range(len(dotted), 0, -1):
        base = ROOT.joinpath(*dotted[:cut])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, dotted[cut:]
        if base.is_dir() and cut == len(dotted):
            return base, []
    return None, dotted


def code_span_error(span: str) -> str | None:
    """Why a code span that names a repository path or a dotted module path does not resolve."""
    if REPO_PATH.match(span):
        path_part, _, fragment = (re.split(r"(#|::)", span, maxsplit=1) + ["", ""])[:3]
        path = ROOT / path_part.rstrip("/")
        if not path.exists():
            return f"`{span}`: no such file or folder"
        if fragment:
            return symbol_error(path, fragment) if path.suffix == ".py" else None
        return None
    if DOTTED.match(span):
        path, rest = module_path(span.split("."))
        if path is None:
            return f"`{span}`: no such module"
        if rest:
            return (
                symbol_error(path, ".".join(rest[:2]))
                if path.is_file()
                else (f"`{span}`: no such module")
            )
    return None


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = [err for t in links(page) if (err := target_error(page, t))]
    assert not broken, f"{rel(page)}:\n  " + "\n  ".join(broken)


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_code_spans_name_existing_paths_and_symbols(page: Path) -> None:
    spans = CODE_SPAN.findall(prose(page.read_text(encoding="utf-8")))
    broken = sorted({err for s in spans if (err := code_span_error(s.strip()))})
    assert not broken, f"{rel(page)}:\n  " + "\n  ".join(broken)


def test_readme_is_short() -> None:
    data = README.read_bytes()
    assert data.count(b"\n") < README_MAX_LINES, "README.md has 200 lines or more"
    assert len(data) < README_MAX_BYTES, f"README.md is {len(data)} bytes"


def test_every_page_is_reachable_from_the_readme() -> None:
    seen, todo = set(), [README]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in links(page):
            path_part = target.partition("#")[0]
            if not path_part or re.match(r"^[a-z][a-z0-9+.-]*:", path_part, re.I):
                continue
            path = (page.parent / path_part).resolve()
            if path.is_dir() and (path / "README.md").exists():
                path = path / "README.md"
            if path.suffix == ".md" and path.is_file():
                todo.append(path)
    orphans = [rel(p) for p in pages() if p not in seen]
    assert not orphans, "pages no link leads to from README.md: " + ", ".join(orphans)


def sitting_mentions() -> list[str]:
    """Lines of the product that speak of numbered work sessions."""
    files = [README, *(ROOT / "docs").rglob("*.md")]
    for package in PACKAGES:
        files += [*(ROOT / package).rglob("*.py"), *(ROOT / package).rglob("*.md")]
    hits = []
    for path in sorted(set(files)):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if WORK_SITTING.search(line):
                hits.append(f"{rel(path)}:{n}: {line.strip()}")
    return hits


def test_no_page_or_comment_speaks_of_work_sessions() -> None:
    hits = sitting_mentions()
    assert not hits, "\n".join(hits)


def test_history_is_told_by_commit_not_by_sitting() -> None:
    docs = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    if CHANGELOG.exists():
        docs.append(CHANGELOG)
    hits = [
        f"{rel(p)}:{n}: {line.strip()}"
        for p in docs
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if SITTING_WORDS.search(line)
    ]
    assert not hits, "\n".join(hits)
