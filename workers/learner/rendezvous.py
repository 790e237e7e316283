"""A torch.distributed key-value store kept in Redis, for forming process groups.

The job's learners come and go, so no learner can host the rendezvous (a TCPStore dies with
its host). Redis outlives them all; each generation uses a fresh key prefix.
"""

from __future__ import annotations

import datetime
import time

import redis
import torch.distributed as dist

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
