"""What a production deployment of EDT still lacks, item by item: ``manage.py edt_check``
prints the list and ``make run`` the items missing. Each item says what is so and what to
do, in the README's words ("Security model", "Configuration")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from workers import deployment

OK, WARNING, CHECK = "OK", "WARNING", "CHECK"  # CHECK: only the admin can see it
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


@dataclass(frozen=True)
class Item:
    status: str  # OK, WARNING (missing for production) or CHECK (to check by hand)
    name: str
    text: str

    @property
    def missing(self) -> bool:
        return self.status == WARNING


def items(redis_url: str | None = None) -> list[Item]:
    """Every item, in the order an admin goes through them; ``redis_url`` defaults to the
    settings' ``REDIS_URL``."""
    url = redis_url or settings.REDIS_URL
    return [
        _found("Redis password", deployment.redis_finding(url)),
        _found("learner user", deployment.user_finding()),
        debug(),
        secret_key(),
        proxy_body_limit(),
        https(),
        allowed_hosts(),
        database(),
        metrics_token(),
    ]


def _found(name: str, finding: deployment.Finding) -> Item:
    return Item(OK if finding.ok else WARNING, name, finding.text)


def debug() -> Item:
    if settings.DEBUG:
        return Item(WARNING, "DEBUG", "DEBUG is on: its pages show settings and code; set DEBUG=0")
    return Item(OK, "DEBUG", "DEBUG is off")


def secret_key() -> Item:
    """Where ``SECRET_KEY`` comes from, and whether it is long and random enough (as
    Django's own deployment check wants it)."""
    key = settings.SECRET_KEY
    source = _secret_key_source(key)
    if len(key) < 50 or len(set(key)) < 5 or key.startswith("django-insecure-"):
        return Item(WARNING, "SECRET_KEY", (
            f"SECRET_KEY (from {source}) is short or simple: set a random one of 50 "
            "characters or more, the same on every host (each job's Redis password is "
            "derived from it)"
        ))  # fmt: skip
    return Item(OK, "SECRET_KEY", f"SECRET_KEY from {source}")


def _secret_key_source(key: str) -> str:
    generated = Path(settings.EDT_DATA_DIR) / "secret_key"
    if os.environ.get("SECRET_KEY", "").strip() == key:
        return "the environment (SECRET_KEY)"
    if generated.exists() and generated.read_text().strip() == key:
        return f"{generated}, generated once: every host must share it, or set SECRET_KEY"
    return "the settings"


def proxy_body_limit() -> Item:
    limit_mib = -(-settings.EDT_MAX_UPLOAD_BYTES // 2**20) + 1
    return Item(CHECK, "proxy body limit", (
        "EDT cannot see the reverse proxy from here: put a body size limit on it, at least "
        f"EDT_MAX_UPLOAD_BYTES plus a little (nginx: client_max_body_size {limit_mib}m), so "
        "that uploads too large are refused before they reach Django"
    ))  # fmt: skip


def https() -> Item:
    if not settings.EDT_HTTPS:
        return Item(WARNING, "HTTPS", (
            "EDT_HTTPS=0: serve EDT behind TLS and set EDT_HTTPS=1 (secure cookies, HSTS, "
            "redirect to https)"
        ))  # fmt: skip
    return Item(OK, "HTTPS", "EDT_HTTPS=1: secure cookies, HSTS, redirect to https")


def allowed_hosts() -> Item:
    hosts = list(settings.ALLOWED_HOSTS)
    if set(hosts) <= LOCAL_HOSTS:
        return Item(WARNING, "ALLOWED_HOSTS", (
            "ALLOWED_HOSTS names only this machine: add the name users reach EDT by "
            "(ALLOWED_HOSTS=edt.example.com)"
        ))  # fmt: skip
    return Item(OK, "ALLOWED_HOSTS", "ALLOWED_HOSTS=" + ",".join(hosts))


def database() -> Item:
    db = settings.DATABASES["default"]
    if "sqlite" in db["ENGINE"]:
        return Item(WARNING, "database", (
            f"SQLite at {db['NAME']}: only for hosts that share one local file system; set "
            "DATABASE_URL to a PostgreSQL database"
        ))  # fmt: skip
    return Item(OK, "database", f"{db['ENGINE'].rpartition('.')[2]} database {db['NAME']}")


def metrics_token() -> Item:
    if not settings.EDT_METRICS_TOKEN:
        return Item(CHECK, "metrics token", (
            "/metrics answers anyone who reaches the web (job numbers, their workers and "
            "samples/s, the slots): set EDT_METRICS_TOKEN, or let only your monitoring "
            "reach it"
        ))  # fmt: skip
    return Item(OK, "metrics token", "/metrics asks for the bearer token in EDT_METRICS_TOKEN")
