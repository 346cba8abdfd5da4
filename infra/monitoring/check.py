"""Check every dashboard query and every rule expression against a live Prometheus.

``check_queries(prom_url, {"run": run_id})`` loads each panel target of
``dashboards/*.json`` (template variables expanded: given ones from
``variables``, the others as their "All" value, Grafana's ``$__rate_interval``
and friends as fixed windows) and each expression of ``rules/*.yml``, runs them
on ``/api/v1/query`` (``core.prom``'s client) and returns a list of problems, empty
when all is well:

- the query is invalid (Prometheus answers an error);
- a panel query returns no series, only a scalar, or only NaN;
- a vector selector inside a panel query or a rule returns no series for the
  run (so ``a or b`` cannot hide a dead ``a``, and a healthy alert, whose
  thresholded expression is empty, still proves that its inputs exist);
- the query is padded (``vector(...)``, ``absent(...)``): padding is not data.

``python -m infra.monitoring.check --url http://127.0.0.1:9090 --run RUN``
prints the problems (exit 1 if any).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import urllib.error
from pathlib import Path

import yaml

from core.prom import Prom, PrometheusUnavailable, PromQueryError

HERE = Path(__file__).resolve().parent
DASHBOARDS = HERE / "dashboards"
RULES = HERE / "rules"

# Grafana's built-in interval variables, as fixed windows (a 1 s / 2 s scrape interval)
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
    "__interval_ms": "15000",
    "__range_s": "300",
}
PADDING = re.compile(r"\b(vector|absent|absent_over_time)\s*\(")
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "start",
    "end",
}
LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_VAR = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")


# --- loading ---------------------------------------------------------------------


def iter_panels(dashboard: dict):
    """Every panel, including panels nested in (collapsed) rows."""
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])


def dashboard_queries(path: Path) -> list[tuple[str, str]]:
    """(where, expr) of every Prometheus target of one dashboard file."""
    d = json.loads(Path(path).read_text())
    out = []
    for p in iter_panels(d):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append(
                    (
                        f"{Path(path).name}: panel {p.get('title')!r} ({t.get('refId', '?')})",
                        t["expr"],
                    )
                )
    return out


def template_defaults(dashboard: dict) -> dict[str, str]:
    """Value of each template variable when not given: its "All" value (a regex), else ``.*``."""
    out = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "datasource":
            continue
        out[v["name"]] = v.get("allValue") or ".*"
    return out


def variable_queries(path: Path) -> list[tuple[str, str, str]]:
    """(where, selector, label) of each ``label_values(selector, label)`` template variable."""
    d = json.loads(Path(path).read_text())
    out = []
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q, re.S)
        if v.get("type") == "query" and m:
            out.append((f"{Path(path).name}: variable ${v['name']}", m.group(1), m.group(2)))
    return out


def rule_expressions(rules_dir: Path = RULES) -> list[tuple[str, str]]:
    out = []
    for f in sorted(Path(rules_dir).glob("*.yml")):
        for g in (yaml.safe_load(f.read_text()) or {}).get("groups", []):
            for r in g.get("rules", []):
                name = r.get("alert") or r.get("record")
                out.append(
                    (f"{f.name}: {'alert' if 'alert' in r else 'record'} {name}", str(r["expr"]))
                )
    return out


def expand(expr: str, variables: dict, defaults: dict | None = None) -> str:
    """Grafana-style variable expansion: ``$x``, ``${x}``, ``${x:fmt}``, ``[[x]]``."""
    values = {**BUILTINS, **(defaults or {}), **{k: str(v) for k, v in variables.items()}}

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise KeyError(name)
        return values[name]

    return _VAR.sub(sub, expr)


# --- PromQL scanning -------------------------------------------------------------------


def _skip_string(s: str, i: int) -> int:
    q = s[i]
    i += 1
    while i < len(s) and s[i] != q:
        i += 2 if s[i] == "\\" and q != "`" else 1
    return i + 1


def _skip_balanced(s: str, i: int, open_: str, close: str) -> int:
    depth = 0
    while i < len(s):
        c = s[i]
        if c in "\"'`":
            i = _skip_string(s, i)
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def selectors(expr: str) -> list[str]:
    """The vector selectors of a PromQL expression (``name{matchers}`` or ``{matchers}``),
    without range/offset parts, in order of appearance."""
    out, i, s = [], 0, expr
    while i < len(s):
        c = s[i]
        if c in "\"'`":
            i = _skip_string(s, i)
        elif c == "#":  # comment to end of line
            while i < len(s) and s[i] != "\n":
                i += 1
        elif c == "[":
            i = _skip_balanced(s, i, "[", "]")
        elif c == "{":
            j = _skip_balanced(s, i, "{", "}")
            out.append(s[i:j])
            i = j
        elif c.isdigit() or (c == "." and i + 1 < len(s) and s[i + 1].isdigit()):
            while i < len(s) and (s[i].isalnum() or s[i] in "._"):
                i += 1
        elif m := _IDENT.match(s, i):
            i = _identifier(s, m, out)
        else:
            i += 1
    return out


def _identifier(s: str, m: re.Match, out: list[str]) -> int:
    """An identifier ``m`` of ``selectors``' scan: a metric name (its selector, with any
    ``{matchers}``, is appended to ``out``) unless it is a keyword, a function, an
    aggregation or a label list. Returns where the scan goes on."""
    name, i = m.group(0), m.end()
    j = i
    while j < len(s) and s[j].isspace():
        j += 1
    if name in LIST_KEYWORDS:
        if j < len(s) and s[j] == "(":
            i = _skip_balanced(s, j, "(", ")")
    elif name in KEYWORDS or (j < len(s) and s[j] == "("):
        pass  # keyword, function or aggregation
    elif (nxt := _IDENT.match(s, j)) and nxt.group(0) in ("by", "without"):
        pass  # aggregation with a leading clause: sum by (x) (...)
    elif j < len(s) and s[j] == "{":
        k = _skip_balanced(s, j, "{", "}")
        out.append(name + s[j:k])
        i = k
    else:
        out.append(name)
    return i


def metric_name(selector: str) -> str | None:
    m = _IDENT.match(selector)
    if m:
        return m.group(0)
    m = re.search(r"__name__\s*=\s*\"([^\"]+)\"", selector)
    return m.group(1) if m else None


def padded(expr: str) -> str | None:
    m = PADDING.search(expr)
    return f"padded with {m.group(1)}(): padding is not data" if m else None


# --- live checks -----------------------------------------------------------------------


# a query Prometheus rejected, or no answer from it (through core.prom's client)
PROM_ERRORS = (PromQueryError, PrometheusUnavailable)


def _reason(e: Exception) -> str:
    """Why a query failed: Prometheus' own ``errorType: error``, else what the request failed
    with (the URL error, or the HTTP error of an answer that is not the API's)."""
    if isinstance(e, PromQueryError):
        return f"{e.error_type}: {e.error}"
    if isinstance(e.__cause__, urllib.error.HTTPError):
        return f"HTTP {e.__cause__.code}"
    return str(e.__cause__ or e)


def _values(data: dict) -> list[float]:
    if data["resultType"] == "vector":
        return [float(r["value"][1]) for r in data["result"]]
    if data["resultType"] == "matrix":
        return [float(v[1]) for r in data["result"] for v in r["values"]]
    return []


def _check_one(
    prom: Prom, where: str, expr: str, run: str | None, at: float | None, need_series: bool
) -> list[str]:
    problems = []
    p = padded(expr)
    if p:
        problems.append(f"{where}: {p}: {expr}")
    try:
        data = prom.instant(expr, at)
    except PROM_ERRORS as e:
        return problems + [f"{where}: invalid query ({_reason(e)}): {expr}"]
    if need_series:
        if data["resultType"] in ("scalar", "string"):
            problems.append(f"{where}: returns a {data['resultType']}, not series: {expr}")
        elif not data["result"]:
            problems.append(f"{where}: no series: {expr}")
        elif all(math.isnan(v) for v in _values(data)):
            problems.append(f"{where}: only NaN (no data in the window): {expr}")
    for sel in dict.fromkeys(selectors(expr)):
        try:
            res = prom.instant(sel, at)["result"]
        except PROM_ERRORS as e:
            problems.append(f"{where}: invalid selector {sel} ({_reason(e)})")
            continue
        if run is not None:
            res = [r for r in res if r["metric"].get("run") == run]
        if not res:
            problems.append(
                f"{where}: selector {sel} has no series" + (f" for run {run!r}" if run else "")
            )
    return problems


def check_queries(
    prom_url: str,
    variables: dict,
    at: float | None = None,
    dashboards_dir: Path = DASHBOARDS,
    rules_dir: Path = RULES,
) -> list[str]:
    """Problems of every dashboard query and rule expression on the live Prometheus (empty = ok).

    ``variables``: template variables, e.g. ``{"run": run_id}``; ``run`` also restricts the
    rule selectors to that run. ``at``: evaluation time (unix seconds, default now).
    """
    prom = Prom(prom_url)
    run = variables.get("run")
    problems: list[str] = []
    for f in sorted(Path(dashboards_dir).glob("*.json")):
        d = json.loads(f.read_text())
        defaults = template_defaults(d)
        for where, selector, label in variable_queries(f):
            try:
                sel = expand(selector, variables, defaults)
                res = prom.instant(f"count by ({label}) ({sel})", at)["result"]
            except KeyError as e:
                problems.append(f"{where}: unknown template variable ${e.args[0]}")
                continue
            except PROM_ERRORS as e:
                problems.append(f"{where}: invalid query ({_reason(e)}): {selector}")
                continue
            vals = {r["metric"].get(label) for r in res}
            name = where.rsplit("$", 1)[1]
            if not vals or (name in variables and str(variables[name]) not in vals):
                problems.append(
                    f"{where}: label_values({selector}, {label}) gives {sorted(map(str, vals))}"
                )
        for where, expr in dashboard_queries(f):
            try:
                e = expand(expr, variables, defaults)
            except KeyError as k:
                problems.append(f"{where}: unknown template variable ${k.args[0]}: {expr}")
                continue
            problems += _check_one(prom, where, e, run, at, need_series=True)
    for where, expr in rule_expressions(rules_dir):
        problems += _check_one(
            prom, where, expr, run, at, need_series=where.split(": ", 1)[1].startswith("record")
        )
    return problems


def wait_for_queries(
    prom_url: str, variables: dict, timeout_s: float = 60.0, interval_s: float = 5.0, **kw
) -> list[str]:
    """``check_queries`` until it finds no problem or ``timeout_s`` passes; the last problems.

    For a young run: some series (world-model fidelity, hot reloads) appear only after the
    first checkpoints. Invalid queries are returned at once (waiting cannot fix them)."""
    import time

    deadline = time.time() + timeout_s
    while True:
        problems = check_queries(prom_url, variables, **kw)
        if (
            not problems
            or time.time() >= deadline
            or any("invalid" in p or "padded" in p for p in problems)
        ):
            return problems
        time.sleep(interval_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:9090", help="Prometheus base URL")
    ap.add_argument("--run", required=True, help="run id ($run)")
    ap.add_argument(
        "--var", action="append", default=[], metavar="NAME=VALUE", help="more template variables"
    )
    ap.add_argument("--at", type=float, help="evaluation time (unix seconds; default now)")
    a = ap.parse_args(argv)
    variables = {"run": a.run, **dict(kv.split("=", 1) for kv in a.var)}
    problems = check_queries(a.url, variables, at=a.at)
    for p in problems:
        print(p)
    n = sum(len(dashboard_queries(f)) for f in sorted(DASHBOARDS.glob("*.json")))
    print(
        f"{n} panel queries, {len(rule_expressions())} rule expressions: {len(problems)} problems"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
