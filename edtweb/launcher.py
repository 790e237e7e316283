"""`make run`: one command that brings up a whole single-machine EDT.

Steps: find Redis (or start one), migrate, create the admin once, then run web, live
updates, scheduler, metrics consumer, sweep driver and worker host under a supervisor that restarts
whichever dies (``workers/supervisor.py``: after 1 s, doubling to 30 s while it keeps dying
quickly), and print the URL and the login once the web answers. Ctrl-C (or SIGTERM) stops
everything it started, Redis included.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from edtweb import deploycheck
from edtweb.redis_server import (
    RedisServer,
    RedisUnavailable,
    free_port,
    ping_error,
    redacted,
    redis_password,
)
from protocol.connection import lets_anyone_in
from workers.supervisor import supervise_commands

ADMIN_USER = "admin"
DEFAULT_PROBE = "redis://127.0.0.1:6379/0"


class LaunchError(RuntimeError):
    """A reason to stop before anything starts, said in one line."""


@dataclass
class Options:
    port: int = 8000
    cpu_slots: int | None = None
    redis_probe: str = DEFAULT_PROBE
    live_port: int | None = None  # WebSockets from a Daphne of their own (None: a free port)
    demo: bool = True  # seed the demo dataset and the example models on a fresh install


def resolve_redis(
    data_dir: Path, probe: str, avoid: Collection[int] = ()
) -> tuple[str, RedisServer | None]:
    """REDIS_URL if set (it must answer); else ``probe`` if it answers and asks for a
    password; else our own, which does, on a port not in ``avoid`` (the web's). A Redis
    that lets anyone in is not used unless the admin names it: worker hosts would refuse
    user code on it (``workers/deployment.py``)."""
    configured = os.environ.get("REDIS_URL", "").strip()
    if configured:
        error = ping_error(configured)
        if error:
            raise LaunchError(
                f"REDIS_URL={configured} does not answer ({error}). Start Redis there, "
                "or unset REDIS_URL and EDT will use or start one itself."
            )
        return configured, None
    if ping_error(probe, timeout=0.5) is None:
        if not lets_anyone_in(probe, timeout=0.5):
            return probe, None
        print(
            f"EDT: the Redis at {redacted(probe)} lets anyone in without a password: not "
            "using it; starting EDT's own Redis, which asks for one (to use that Redis "
            "anyway, for development only: REDIS_URL and EDT_ALLOW_OPEN_REDIS=1)",
            flush=True,
        )
    try:
        password = redis_password(data_dir)  # learners get a per-job ACL user instead
        # It goes with the launcher however the launcher ends (kill -9, or SIGTERM while
        # Django still starts, before the supervisor's handlers are in): SIGTERM, which
        # writes the append-only file out; no Redis of ours is left holding a port.
        server = RedisServer(
            data_dir / "redis", appendonly=True, password=password, avoid=avoid,
            dies_with_parent=True,
        ).start()  # fmt: skip
    except RedisUnavailable as exc:
        raise LaunchError(str(exc)) from None
    return server.url, server


def ensure_admin(data_dir: Path) -> str:
    """Create the admin account once; the password is kept in ``<data>/admin-password``."""
    from django.contrib.auth import get_user_model

    users = get_user_model()
    secret = data_dir / "admin-password"
    if users.objects.filter(username=ADMIN_USER).exists():
        if secret.exists():
            return secret.read_text().strip()
        return "(password set earlier; change it with `python manage.py changepassword admin`)"
    password = secrets.token_urlsafe(12)
    users.objects.create_superuser(ADMIN_USER, "", password)
    secret.touch(mode=0o600)
    secret.write_text(password + "\n")
    return password


def seed_demo() -> None:
    """A fresh install can train at once: a demo dataset (generated here, no download) and
    the example models, owned by the admin."""
    from django.contrib.auth import get_user_model

    from edtweb.datasets import services as datasets
    from edtweb.datasets.models import Dataset
    from edtweb.registry import services as registry

    admin = get_user_model().objects.get(username=ADMIN_USER)
    if Dataset.objects.filter(owner=admin).exists():
        return
    print("EDT: generating the demo dataset and checking the example models…", flush=True)
    datasets.create_demo(admin)
    registry.create_examples(admin, Path(settings.BASE_DIR) / "examples")


def static_is_current() -> bool:
    """True when the collected files are newer than every source file they come from."""
    from django.contrib.staticfiles import finders

    manifest = Path(settings.STATIC_ROOT) / "staticfiles.json"
    if not manifest.exists():
        return False
    collected = manifest.stat().st_mtime
    for finder in finders.get_finders():
        for path, storage in finder.list([]):
            if Path(storage.path(path)).stat().st_mtime > collected:
                return False
    return True


def collect_static() -> subprocess.Popen[bytes] | None:
    """Start `collectstatic` in a child process (it runs beside the demo's seeding), unless
    the collected files are current."""
    if static_is_current():
        return None
    command = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"]
    return subprocess.Popen(command, cwd=settings.BASE_DIR, env=dict(os.environ))


def processes(opts: Options) -> dict[str, str]:
    """The commands the launcher supervises. Those of ``manage.py`` skip Django's system
    checks: the launcher's own command ran them (most of a second of CPU each)."""
    py = sys.executable
    worker = f"{py} manage.py edt_worker --skip-checks"
    if opts.cpu_slots is not None:
        worker += f" --cpu-slots {opts.cpu_slots}"
    return {
        "web": f"{py} -m daphne -b 127.0.0.1 -p {opts.port} edtweb.asgi:application",
        # Live updates apart from pages and API: a busy API never delays a WebSocket.
        "live": f"{py} -m daphne -b 127.0.0.1 -p {opts.live_port} edtweb.asgi:application",
        "scheduler": f"{py} manage.py edt_scheduler --skip-checks",
        # Metrics from Redis into the database and to the pages, apart from the decisions.
        "metrics": f"{py} manage.py edt_metrics --skip-checks",
        # Sweeps: their Optuna studies, trials asked as jobs, reported, pruned.
        "sweeps": f"{py} manage.py edt_sweeps --skip-checks",
        "worker": worker,
    }


def announce_when_up(url: str, password: str, timeout: float = 120) -> None:
    """Print the URL and the login once the login page answers."""

    def wait() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "accounts/login/", timeout=30):
                    break
            except OSError:
                time.sleep(0.3)
        else:
            print(f"EDT: web did not answer at {url} within {timeout:.0f} s", flush=True)
            return
        banner = (
            f"\n  EDT is running at {url}\n  log in as {ADMIN_USER} / {password}\n"
            "  (password kept in the data directory, file admin-password; Ctrl-C stops all)\n\n"
        )
        print(banner, flush=True)

    threading.Thread(target=wait, name="edt-announce", daemon=True).start()


def announce_missing(redis_url: str) -> None:
    """One line per item a production deployment still lacks (``manage.py edt_check``)."""
    for item in deploycheck.items(redis_url):
        if item.missing:
            print(f"EDT: for production: {item.text}", flush=True)


def run(opts: Options) -> int:
    data_dir = Path(settings.EDT_DATA_DIR)
    redis_url, own_redis = resolve_redis(data_dir, opts.redis_probe, avoid={opts.port})
    try:
        where = "started by EDT, append-only under " + str(own_redis.directory) if own_redis else ""
        print(f"EDT: Redis at {redacted(redis_url)} {where}".rstrip(), flush=True)
        announce_missing(redis_url)
        os.environ["REDIS_URL"] = redis_url
        os.environ["EDT_DATA_DIR"] = str(data_dir)
        call_command("migrate", interactive=False, verbosity=0)
        # Hashed, compressed static files for the web (plotly.js goes out gzipped), collected
        # while the demo is seeded.
        collect = collect_static()
        # Neither the web's port nor our Redis's, which may not be bound yet: a pick from
        # EDT_PORT_RANGE could hand either out again.
        taken = {opts.port} | ({own_redis.port} if own_redis else set())
        opts.live_port = opts.live_port or free_port(avoid=taken)
        os.environ["EDT_LIVE_PORT"] = str(opts.live_port)
        password = ensure_admin(data_dir)
        if opts.demo:
            seed_demo()
        if collect is not None and collect.wait() != 0:
            print("EDT: collectstatic failed: static files are served uncompressed", flush=True)
        supervisor = supervise_commands(processes(opts), dict(os.environ), str(settings.BASE_DIR))
        announce_when_up(f"http://127.0.0.1:{opts.port}/", password)
        return supervisor.run()
    finally:
        if own_redis is not None:
            own_redis.stop()
