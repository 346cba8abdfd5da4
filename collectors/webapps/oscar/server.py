"""The shop's server process, and ``ShopServer`` to start and stop it from Python.

    python -m collectors.webapps.oscar.server --home DIR --port 8770 [--seed 0]

At its first start in ``DIR`` it writes a secret key, the control token and the admin
credentials (each a 0600 file; the password is never printed or logged), migrates the SQLite
database and loads the seeded catalogue (``collectors.webapps.oscar.data``); then it serves the
shop with Django's threaded server on 127.0.0.1 (static files included: ``--insecure``).
Later starts reuse the database.  ``ready`` in ``DIR/server.json`` says where it listens.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def prepare_home(home: Path) -> None:
    """Secret key, control token, admin credentials (0600) and the two template overrides."""
    home.mkdir(parents=True, exist_ok=True)
    for name in ("secret_key", "control_token"):
        if not (home / name).exists():
            write_secret(home / name, secrets.token_urlsafe(40))
    if not (home / "admin.json").exists():
        write_secret(
            home / "admin.json",
            json.dumps(
                {
                    "username": "admin",
                    "email": "admin@dynashop.local",
                    "password": secrets.token_urlsafe(18),
                }
            ),
        )
    import oscar

    base = (Path(oscar.__file__).parent / "templates" / "oscar" / "base.html").read_text()
    # jQuery from the shop itself, not from a CDN (the collectors may reach only the shop)
    start = base.index("{% block cdn_scripts %}")
    end = base.index("{% endblock %}", start) + len("{% endblock %}")
    base = (
        base[:start]
        + '{% block cdn_scripts %}<script src="{% static "oscar/js/jquery/jquery.min.js" %}">'
        + "</script>{% endblock %}"
        + base[end:]
    )
    # the answer page is one click away from every page
    body = base.index("{% block layout %}")
    base = (
        base[:body]
        + '<p id="dw-answer-link"><a href="/answer/">Answer the question</a></p>\n'
        + base[body:]
    )
    (home / "templates" / "oscar").mkdir(parents=True, exist_ok=True)
    (home / "templates" / "oscar" / "base.html").write_text(base)


def setup_django(home: Path) -> None:
    os.environ["DW_SHOP_HOME"] = str(home)
    os.environ["DJANGO_SETTINGS_MODULE"] = "collectors.webapps.oscar.settings"
    import django

    django.setup()


def template_db(seed: int) -> Path:
    """A migrated and seeded database kept once per machine (migrating Oscar takes minutes on
    two loaded cores): ``$DYNAWEB_CACHE`` or ``~/.cache/dynaweb``, named by Oscar's version."""
    import oscar

    cache = Path(os.environ.get("DYNAWEB_CACHE", Path.home() / ".cache" / "dynaweb"))
    return cache / f"oscar-{oscar.get_version()}-shop-seed{seed}.sqlite3"


def migrate_and_seed(home: Path, seed: int) -> None:
    """The database: the machine's template copied in if there is one, else migrated and seeded
    here (and kept as the template); then the admin account with this home's password."""
    import shutil

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    db, tmpl = home / "shop.sqlite3", template_db(seed)
    if not (home / f"seeded-{seed}").exists():
        if tmpl.exists() and not db.exists():
            shutil.copyfile(tmpl, db)
        else:
            call_command("migrate", verbosity=0, interactive=False)
            from collectors.webapps.oscar.control import ops

            ops.seed({"seed": seed})
            tmpl.parent.mkdir(parents=True, exist_ok=True)
            part = tmpl.with_suffix(f".{os.getpid()}.part")
            from django.db import connection

            with connection.cursor() as c:
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shutil.copyfile(db, part)
            os.replace(part, tmpl)
        (home / f"seeded-{seed}").write_text("ok\n")
    admin = json.loads((home / "admin.json").read_text())
    User = get_user_model()
    u = User.objects.filter(username=admin["username"]).first() or User(
        username=admin["username"], is_staff=True, is_superuser=True
    )
    u.email, u.is_staff, u.is_superuser = admin["email"], True, True
    u.set_password(admin["password"])
    u.save()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collectors.webapps.oscar.server")
    ap.add_argument("--home", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0, help="the catalogue's seed")
    a = ap.parse_args(argv)
    home = Path(a.home).resolve()
    prepare_home(home)
    setup_django(home)
    migrate_and_seed(home, a.seed)
    from django.core.management import call_command

    # the search index of what the database holds now (settings: nothing re-indexes it later)
    call_command("rebuild_index", interactive=False, verbosity=0)
    (home / "server.json").write_text(
        json.dumps({"url": f"http://{a.host}:{a.port}", "pid": os.getpid(), "seed": a.seed})
    )
    call_command(
        "runserver",
        f"{a.host}:{a.port}",
        use_reloader=False,
        insecure_serving=True,
        use_threading=True,
    )
    return 0


class ShopServer:
    """The shop as a child process (a process group of its own), on ``host:port``."""

    def __init__(self, home: Path, port: int, host: str = "127.0.0.1", seed: int = 0):
        self.home, self.port, self.host, self.seed = Path(home), int(port), host, int(seed)
        self.proc: subprocess.Popen | None = None  # started by this object
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "collectors.webapps.oscar.server", "--home", str(self.home),
            "--host", self.host, "--port", str(self.port), "--seed", str(self.seed),
        ]  # fmt: skip

    def start(self, timeout: float = 240.0) -> ShopServer:
        from core.net import http_status

        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "server.log", "ab")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.time() + timeout
        while http_status(self.url + "/answer/") != 200:
            if self.proc.poll() is not None:
                tail = (self.home / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the shop exited with {self.proc.returncode}: {tail}")
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"the shop did not answer on {self.url} in {timeout:.0f} s")
            time.sleep(0.1)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> bool:
        """Restart the shop if its process died; True when it had to."""
        if self.alive():
            return False
        self.restarts += 1
        self.start()
        return True

    def stop(self) -> None:
        import signal

        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(5)


if __name__ == "__main__":
    raise SystemExit(main())
