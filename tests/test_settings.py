from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from edtweb import env, settings
from tests.harness.processes import PROJECT_DIR, subprocess_env


def check_deploy(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=PROJECT_DIR,
        env=subprocess_env(tmp_path, DJANGO_SETTINGS_MODULE="edtweb.settings", **variables),
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "edt.example.com",
    "EDT_HTTPS": "1",
    "DATABASE_URL": "postgres://edt:secret@db.example.com:5432/edt",
    "REDIS_URL": "redis://redis.example.com:6379/0",
}


def test_check_deploy_passes_with_production_variables(tmp_path: Path) -> None:
    result = check_deploy(tmp_path, **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_flags_plain_http_and_debug(tmp_path: Path) -> None:
    result = check_deploy(tmp_path, **dict(PRODUCTION, EDT_HTTPS="0", DEBUG="1"))
    assert result.returncode != 0
    assert "security.W018" in result.stderr  # DEBUG on
    assert "security.W008" in result.stderr  # no SSL redirect


def test_edts_own_settings_hash_passwords_with_djangos_slow_default(tmp_path: Path) -> None:
    """The test run's settings (tests/settings.py) swap in a fast hash; EDT's own keep
    Django's PBKDF2, and a password stored by them is not an MD5."""
    code = (
        "import django; django.setup(); "
        "from django.contrib.auth.hashers import get_hasher, make_password; "
        "print(get_hasher().algorithm, make_password('x').split('$')[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_DIR,
        env=subprocess_env(tmp_path, DJANGO_SETTINGS_MODULE="edtweb.settings"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["pbkdf2_sha256", "pbkdf2_sha256"], done.stdout


def test_default_database_is_sqlite_with_immediate_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    db = settings._databases()["default"]
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"].startswith(str(settings.EDT_DATA_DIR))
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert db["OPTIONS"]["timeout"] >= 10


def test_database_url_selects_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://edt:pw@db:5433/edtdb")
    db = settings._databases()["default"]
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["HOST"], db["PORT"], db["NAME"], db["USER"]) == ("db", 5433, "edtdb", "edt")
    assert "transaction_mode" not in db.get("OPTIONS", {})


@pytest.mark.parametrize("raw, expected", [("1", True), ("yes", True), ("off", False), ("", False)])
def test_envbool_reads_common_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("EDT_X", raw)
    assert env.envbool("EDT_X", not expected) is expected


def test_envbool_rejects_a_typo_with_the_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "ture")
    with pytest.raises(ValueError, match="DEBUG='ture' is not a boolean"):
        env.envbool("DEBUG", False)


def test_secret_key_is_generated_once_and_kept(tmp_path: Path) -> None:
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    run = [
        sys.executable,
        "-c",
        f"import django, os; os.environ['DJANGO_SETTINGS_MODULE']='edtweb.settings'; {code}",
    ]
    first = subprocess.run(
        run,
        cwd=PROJECT_DIR,
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    )
    second = subprocess.run(
        run,
        cwd=PROJECT_DIR,
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(first.stdout.strip()) >= 50
    assert first.stdout == second.stdout
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0


def test_celery_reads_a_socket_and_tls_url_its_own_way() -> None:
    """Celery's broker has no ``unix://`` transport and wants ``ssl_cert_reqs`` said: the
    one REDIS_URL is rewritten for it (the config matrix runs both against real Redis)."""
    import ssl

    from edtweb.redis_urls import celery_options
    from protocol.connection import url_files

    socket = celery_options("unix://:pw@/run/redis/redis.sock?db=2")
    assert socket["BROKER_URL"] == "redis+socket://:pw@/run/redis/redis.sock?virtual_host=2"
    tls = celery_options("rediss://:pw@h:6380/3?ssl_ca_certs=/etc/ca.pem")
    assert tls["BROKER_URL"] == tls["RESULT_BACKEND"] == "rediss://:pw@h:6380/3"
    assert tls["BROKER_USE_SSL"] == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": "/etc/ca.pem",
    }
    none = celery_options("rediss://h:6380/0?ssl_cert_reqs=none")["BROKER_USE_SSL"]
    assert none == {"ssl_cert_reqs": ssl.CERT_NONE}
    with pytest.raises(ValueError, match="ssl_cert_reqs"):
        celery_options("rediss://h/0?ssl_cert_reqs=maybe")
    assert celery_options("redis://:pw@h:6379/3")["BROKER_URL"] == "redis://:pw@h:6379/3"
    assert [str(p) for p in url_files("unix:///run/redis/redis.sock?db=0")] == [
        "/run/redis/redis.sock"
    ]
    files = url_files("rediss://h/0?ssl_ca_certs=/a/ca.pem&ssl_certfile=/a/c.pem&ssl_keyfile=/a/k")
    assert [str(p) for p in files] == ["/a/ca.pem", "/a/c.pem", "/a/k"]
    assert url_files("redis://h:6379/0") == []
