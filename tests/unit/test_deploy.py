"""infra/deploy: the Compose file parses and names every service; the configuration it passes
is the embedded stack's (DYNAWEB_<SECTION>__<FIELD>, accepted by core.config.load_config);
the images and mounts it refers to exist in the repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from core.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "infra" / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
SERVICES = {
    "kafka",
    "minio",
    "prometheus",
    "grafana",
    "init",
    "taskserver",
    "stream-worker",
    "trainer",
    "dream",
    "collector-expert",
    "collector-latest",
}
COMPONENTS = {"stream-worker", "trainer", "dream", "collector-expert", "collector-latest"}


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def service_env(name: str) -> dict[str, str]:
    svc = COMPOSE["services"][name]
    env: dict[str, str] = {}
    for f in svc.get("env_file", []):
        env.update(read_env_file(DEPLOY / f))
    e = svc.get("environment", {})
    env.update(e if isinstance(e, dict) else dict(x.split("=", 1) for x in e))
    # compose interpolation (${VAR:?msg} / ${VAR:-default}) -> a stand-in value
    return {k: re.sub(r"\$\{[^}]+\}", "x", str(v)) for k, v in env.items()}


def test_compose_names_every_service() -> None:
    assert SERVICES <= set(COMPOSE["services"]), SERVICES - set(COMPOSE["services"])
    kafka = COMPOSE["services"]["kafka"]
    assert "apache/kafka" in kafka["image"]
    assert "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    assert "minio/minio" in COMPOSE["services"]["minio"]["image"]
    assert "prom/prometheus" in COMPOSE["services"]["prometheus"]["image"]
    assert "grafana/grafana" in COMPOSE["services"]["grafana"]["image"]


def test_components_run_the_cli_with_the_project_image() -> None:
    for name in COMPONENTS:
        svc = COMPOSE["services"][name]
        assert svc["build"]["dockerfile"] == "infra/deploy/Dockerfile", name
        assert (
            ROOT / svc["build"]["context"].replace("../..", ".") / svc["build"]["dockerfile"]
        ).exists()
        cmd = svc["command"]
        assert cmd[0] == "dynaweb", name
        from infra.cli import build_parser

        build_parser().parse_args(cmd[1:])  # a valid `dynaweb` command line
        assert svc["depends_on"]["init"]["condition"] == "service_completed_successfully"


def test_env_keys_are_config_keys_and_reach_the_config() -> None:
    for name in COMPONENTS | {"init", "taskserver"}:
        env = service_env(name)
        keys = [k for k in env if k.startswith("DYNAWEB_")]
        assert keys, name
        cfg = load_config(env=env)  # raises ValueError on an unknown key
        assert cfg.kafka.bootstrap == "kafka:9092" and cfg.s3.endpoint == "minio:9000", name
        assert (
            cfg.stack.bind == "0.0.0.0"
            and cfg.home == "/dynaweb"
            and cfg.run_id == env["DYNAWEB_RUN_ID"]
        )
        assert cfg.s3.access_key and cfg.s3.secret_key, f"{name}: S3 keys come from the environment"
        for k in keys:
            if "__" in k:
                sec, field = k[len("DYNAWEB_") :].lower().split("__", 1)
                val = getattr(getattr(cfg, sec), field)
                if isinstance(val, int | float) and not isinstance(val, bool):
                    assert val == float(env[k]), k
                else:
                    assert str(val).lower() == env[k].lower(), k
            else:
                assert k in ("DYNAWEB_HOME", "DYNAWEB_RUN_ID", "DYNAWEB_CONFIG"), (
                    f"{k}: not read by load_config"
                )


def test_no_secret_in_committed_env_files() -> None:
    for f in DEPLOY.glob("*.env"):
        env = read_env_file(f)
        for k in (
            "DYNAWEB_S3__SECRET_KEY",
            "DYNAWEB_S3__ACCESS_KEY",
            "DYNAWEB_KAFKA__SASL_PASSWORD",
        ):
            assert k not in env, f"{f.name}: {k} belongs in .env / the shell"


def test_mounted_monitoring_files_exist_and_prometheus_reads_the_shared_targets() -> None:
    for name in ("prometheus", "grafana"):
        for m in COMPOSE["services"][name]["volumes"]:
            src = m.split(":")[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), f"{name}: {src}"
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "dynaweb"]
    (files,) = [c["files"] for c in job["file_sd_configs"]]
    home = service_env("trainer")["DYNAWEB_HOME"]
    assert files == [
        f"{home}/prometheus/targets/*.json"
    ]  # where core.metrics.MetricsEndpoint writes
    assert any(
        v.startswith("dynaweb-home:" + home) for v in COMPOSE["services"]["prometheus"]["volumes"]
    )
    assert prom["rule_files"] == ["/etc/prometheus/rules/*.yml"]


def test_every_dashboard_file_is_valid_json() -> None:
    files = sorted((ROOT / "infra" / "monitoring" / "dashboards").glob("*.json"))
    assert files
    for f in files:
        d = json.loads(f.read_text())
        assert d["uid"] and d["title"] and d["panels"], f.name
