"""Grafana dashboards: valid JSON, every panel has a query, the datasource uid is the
provisioned one, template variables are defined, and every metric a query uses is declared
in the components' metrics modules (or is a Prometheus/prometheus_client built-in)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from infra.monitoring import check

MON = Path(__file__).resolve().parents[2] / "infra" / "monitoring"
DASHBOARDS = sorted((MON / "dashboards").glob("*.json"))
BUILTIN = {
    "up",
    "ALERTS",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "python_gc_objects_collected_total",
}


def declared_series() -> set[str]:
    """Every series name the declared metrics export (counters: _total/_created, histograms: ...)."""
    import collectors.metrics
    import models.metrics
    import streams.metrics

    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "info": ("_info",),
        "enum": ("",),
    }
    out = set()
    for mod in (models.metrics, collectors.metrics, streams.metrics):
        for obj in vars(mod).values():
            if isinstance(obj, MetricWrapperBase):
                out |= {obj._name + s for s in suffixes[obj._type]}
    return out


def provisioned_uid() -> str:
    (f,) = sorted((MON / "provisioning" / "datasources").glob("*.yml"))
    (ds,) = yaml.safe_load(f.read_text())["datasources"]
    assert ds["type"] == "prometheus"
    return ds["uid"]


def test_declared_names_follow_the_convention() -> None:
    names = declared_series()
    assert names
    assert all(
        re.fullmatch(r"dynaweb_(trainer|dream|collector|stream|client)_[a-z0-9_]+", n)
        for n in names
    ), names


def test_one_overview_and_one_dashboard_per_component() -> None:
    uids = {json.loads(f.read_text())["uid"] for f in DASHBOARDS}
    assert {
        "dynaweb-overview",
        "dynaweb-collectors",
        "dynaweb-streams",
        "dynaweb-trainer",
        "dynaweb-dream",
    } <= uids


def test_dashboard_provider_points_at_the_mounted_dashboards() -> None:
    (f,) = sorted((MON / "provisioning" / "dashboards").glob("*.yml"))
    (prov,) = yaml.safe_load(f.read_text())["providers"]
    assert prov["type"] == "file" and prov["options"]["path"]
    compose = yaml.safe_load((MON.parent / "deploy" / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert any(
        m.startswith("../monitoring/dashboards:" + prov["options"]["path"]) for m in mounts
    ), mounts


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard(path: Path) -> None:
    d = json.loads(path.read_text())
    uid = provisioned_uid()
    known = declared_series() | BUILTIN
    variables = {v["name"] for v in d["templating"]["list"]}
    assert "run" in variables
    for v in d["templating"]["list"]:
        assert v["datasource"]["uid"] == uid, v["name"]
    ids = [p["id"] for p in check.iter_panels(d)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    panels = [p for p in check.iter_panels(d) if p["type"] != "row"]
    assert panels
    for p in panels:
        where = f"{path.name}: {p['title']!r}"
        assert p["datasource"]["uid"] == uid, where
        assert p["targets"] and all(t.get("expr") for t in p["targets"]), f"{where}: no query"
        for t in p["targets"]:
            assert t["datasource"]["uid"] == uid, where
            expr = t["expr"]
            assert not check.padded(expr), f"{where}: {expr}"
            used = set(re.findall(r"\$\{?(\w+)", expr)) - set(check.BUILTINS)
            assert used <= variables, f"{where}: undefined variables {used - variables}"
            check.expand(expr, {"run": "r"}, check.template_defaults(d))
            sels = check.selectors(expr)
            assert sels, f"{where}: no selector in {expr}"
            for s in sels:
                name = check.metric_name(s)
                assert name in known, f"{where}: {name} is not a declared metric"
                if name.startswith("dynaweb_") or name in (
                    "up",
                    "process_resident_memory_bytes",
                    "process_cpu_seconds_total",
                ):
                    assert re.search(r'\brun="\$run"', s), f"{where}: {s} is not restricted to $run"


def test_selector_scanner() -> None:
    expr = (
        'sum by (run) (rate(a_total{x="1"}[5m] offset 1m)) / on (run) group_left(k) max(b) > 0.3 '
        'and time() - c{q=~"a|b"} < 30 or histogram_quantile(0.95, sum by (le) (rate(d_bucket[1m])))'
    )
    assert check.selectors(expr) == ['a_total{x="1"}', "b", 'c{q=~"a|b"}', "d_bucket"]
    assert (
        check.padded("sum(x) or vector(0)")
        and check.padded("absent(up)")
        and not check.padded("sum(x)")
    )
    assert (
        check.expand('x{run="$run", c=~"${c}"}[$__rate_interval]', {"run": "r"}, {"c": ".*"})
        == 'x{run="r", c=~".*"}[1m]'
    )


def test_rule_selectors_use_declared_metrics() -> None:
    known = declared_series() | BUILTIN
    for where, expr in check.rule_expressions():
        for s in check.selectors(expr):
            assert check.metric_name(s) in known, f"{where}: {s}"
