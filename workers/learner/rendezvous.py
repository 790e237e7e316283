"""A torch.distributed key-value store kept in Redis, for forming process groups, and the
address a learner listens on for its peers.

The job's learners come and go, so no learner can host the rendezvous (a TCPStore dies with
its host). Redis outlives them all; each generation uses a fresh key prefix.

Each learner publishes, through the rendezvous, an address its peers connect to. Gloo's
default is whatever the machine's host name resolves to, which is often a loopback address
(``127.0.1.1`` on Debian, ``127.0.0.1`` in many containers): peers on other hosts then
connect to themselves and the group never forms. A learner listens instead on the address
it reaches Redis from, which its peers, reaching the same Redis, can reach too
(:func:`gloo_options`; ``GLOO_SOCKET_IFNAME`` or ``EDT_LEARNER_ADDRESS`` override it).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import redis
import torch.distributed as dist

log = logging.getLogger("edt.learner")

POLL_SECONDS = 0.002


class RedisStore(dist.Store):  # type: ignore[misc,name-defined]
    """The subset of c10d's Store that gloo's and NCCL's rendezvous use."""

    def __init__(self, url: str, namespace: str, timeout: float = 30.0) -> None:
        super().__init__()
        self.r = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self.namespace = namespace
        self.wait_seconds = timeout

    def _k(self, key: str) -> str:
        return f"{self.namespace}:{key}"

    def set(self, key: str, value: bytes | str) -> None:
        self.r.set(self._k(key), value, ex=86_400)

    def get(self, key: str) -> bytes:
        deadline = time.monotonic() + self.wait_seconds
        while True:
            value = self.r.get(self._k(key))
            if value is not None:
                return _bytes(value)
            if time.monotonic() > deadline:
                raise TimeoutError(f"rendezvous key {key!r} did not appear in time")
            time.sleep(POLL_SECONDS)

    def add(self, key: str, value: int) -> int:
        return int(self.r.incrby(self._k(key), value))

    def check(self, keys: list[str]) -> bool:
        return bool(self.r.exists(*[self._k(k) for k in keys]) == len(keys))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        for key in keys:
            self.get(key)

    def delete_key(self, key: str) -> bool:
        return bool(self.r.delete(self._k(key)))

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        current = self.r.get(self._k(key))
        want = expected.encode() if isinstance(expected, str) else expected
        new = desired.encode() if isinstance(desired, str) else desired
        if (current is None and want == b"") or current == want:
            self.r.set(self._k(key), new, ex=86_400)
            return new
        return _bytes(current) if current is not None else want

    def num_keys(self) -> int:
        return 0


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def address_towards(host: str, port: int) -> str | None:
    """The local address this machine sends from to reach ``host:port`` (the routing
    table's answer: a UDP socket is connected, no packet is sent); None if unroutable."""
    try:
        family, _, _, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            return str(probe.getsockname()[0])
    except OSError:
        return None


def learner_address(redis_url: str) -> str | None:
    """The address to listen on for peers: ``EDT_LEARNER_ADDRESS`` if set, else the one
    this host reaches Redis from; None when that is a loopback address (Redis on this
    machine, named as 127.0.0.1: gloo's own choice stands, right for a single host)."""
    chosen = os.environ.get("EDT_LEARNER_ADDRESS", "").strip()
    if chosen:
        return chosen
    url = urlsplit(redis_url)
    if url.scheme not in ("redis", "rediss") or not url.hostname:
        return None  # a unix socket: Redis, and so every peer, is on this machine
    found = address_towards(url.hostname, url.port or 6379)
    if found is None or ipaddress.ip_address(found.split("%")[0]).is_loopback:
        return None
    return found


def gloo_options(redis_url: str, timeout: datetime.timedelta) -> Any:
    """Options for a gloo group whose peers may be on other hosts (module docstring)."""
    create = dist.ProcessGroupGloo.create_device
    interfaces = [i for i in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if i]
    if interfaces:
        devices = [create(interface=name) for name in interfaces]
        log.info("gloo: listening for peers on interface(s) %s", ", ".join(interfaces))
    else:
        address = learner_address(redis_url)
        if address is None:
            devices = [dist.ProcessGroupGloo.create_default_device()]
            log.info("gloo: listening for peers where this host's name resolves to")
        else:
            devices = [create(hostname=address)]
            log.info("gloo: listening for peers on %s", address)
    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    options._devices = devices
    options._timeout = timeout
    options._threads = 2 * len(devices)  # as torch's own constructor
    return options
