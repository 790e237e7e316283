"""A learner's membership in its job (docs/architecture.md, "Elastic training protocol"):
waiting for a generation that includes it, forming that generation's process group, the
collectives on it, and rank 0's watch on the job's generation and stop flag.

:class:`Membership` is the one writer of where this learner stands: its generation, rank,
group size, the hosts the generation spans, and the process group. The other parts of a
learner read those; the step reads rank 0's part of the agreement from here
(``agreement_host``), as the watch thread last saw it, so that no step waits on Redis.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import os
import threading
import time
import weakref
from typing import Any

import torch
import torch.distributed as dist

from protocol.jobstore import JobStore
from workers.learner.rendezvous import RedisStore, gloo_options
from workers.learner.spec import JobSpec

log = logging.getLogger("edt.learner")
JOIN_POLL_SECONDS = 0.01
JOIN_PATIENCE_SECONDS = 600.0
WATCH_SECONDS = 0.5  # rank 0's watch reads the generation and stop flag at least this often
WATCH_RETRY_SECONDS = 0.5  # while Redis does not answer


class CollectiveFailure(Exception):
    """A peer died or froze: the process group is unusable."""


class ControlWatch(threading.Thread):
    """The job's generation and stop flag as last read from Redis, kept off the step.

    Active only while this learner is rank 0. It reads both when it becomes active, again
    as soon as the job's control channel says one changed (``JobStore.publish_generation``
    and ``request_stop`` publish there), and every ``interval`` seconds besides, for a
    message lost with a connection. Waiting on the channel costs the training process no
    CPU: polling every 20 ms cost the small CNN 3-7 % of its steps at 2 workers on 2 cores.
    A Redis outage leaves the last values in place: training goes on in the current
    generation, and a change published meanwhile is picked up once Redis answers again.
    """

    def __init__(self, jobs: JobStore, slot: str, interval: float = WATCH_SECONDS) -> None:
        super().__init__(name="edt-control-watch", daemon=True)
        self.jobs, self.slot, self.interval = jobs, slot, interval
        self.active = threading.Event()
        self.latest: tuple[int, bool] = (0, False)  # replaced whole: one atomic read
        self.reads = 0
        self.outage_since: float | None = None
        self.channel: Any = None  # the subscription to the job's control channel

    def run(self) -> None:
        while True:
            self.active.wait()
            try:
                self._subscribe()
                gen, stop = self.jobs.poll()  # fails soft: the last answer while Redis is away
                if self.jobs.redis_away:
                    raise ConnectionError("Redis does not answer")
            except Exception as exc:  # Redis down or slow: keep the last values, retry
                self._unsubscribe()
                if self.outage_since is None:
                    self.outage_since = time.monotonic()
                    log.warning("%s: cannot read the generation (%s); training on in "
                                "generation %d", self.slot, exc, self.latest[0])  # fmt: skip
                time.sleep(WATCH_RETRY_SECONDS)
                continue
            if self.outage_since is not None:
                log.info("%s: Redis answers again after %.1f s", self.slot,
                         time.monotonic() - self.outage_since)  # fmt: skip
                self.outage_since = None
            self.latest = (gen, stop)
            self.reads += 1
            try:  # until a change is announced, or the interval is up
                self.channel.get_message(timeout=self.interval)
            except Exception:  # the connection broke: subscribe again, then read
                self._unsubscribe()

    def _subscribe(self) -> None:
        """Subscribe, and wait for Redis to confirm it before the read that follows: a
        change after that read is announced on the channel."""
        if self.channel is not None:
            return
        self.channel = self.jobs.r.pubsub()  # type: ignore[no-untyped-call]
        self.channel.subscribe(self.jobs.key("control"))
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            message = self.channel.get_message(timeout=1.0)
            if message is not None and message["type"] == "subscribe":
                return
        raise ConnectionError("no answer to SUBSCRIBE")

    def _unsubscribe(self) -> None:
        channel, self.channel = self.channel, None
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.close()


class Membership:
    """This learner's generation, rank and process group (one writer of them)."""

    def __init__(
        self, spec: JobSpec, slot: str, jobs: JobStore, redis_url: str, device: torch.device
    ) -> None:
        self.spec, self.slot, self.jobs, self.device = spec, slot, jobs, device
        self.rdv = RedisStore(redis_url, jobs.key("rdv"), spec.collective_timeout)
        self.redis_url = redis_url
        self.gloo: Any = None  # the gloo group options, made once (rendezvous.gloo_options)
        self.gen = 0
        self.rank = 0
        self.size = 1
        self.hosts = 1  # the hosts its generation spans (train records: per-placement rates)
        self.pg: Any = None
        self.watch = ControlWatch(jobs, slot)
        # The process whose death ends this learner: the slot's worker (EDT_WATCH_PID), or
        # whoever started it.
        self.parent_pid = int(os.environ.get("EDT_WATCH_PID") or os.getppid())

    def wait_for_generation(self, after: int, member: bool) -> int | None:
        """The next generation that includes this slot; None when it must leave or stop."""
        deadline = time.monotonic() + JOIN_PATIENCE_SECONDS
        while time.monotonic() < deadline:
            if self.jobs.stop_requested() or self.orphaned():
                return None
            latest = self.jobs.generation()
            if latest > after:
                if self.slot in self.jobs.members(latest):
                    return latest
                if member:
                    return None  # dropped from the job: leave
            time.sleep(JOIN_POLL_SECONDS)
        log.warning("%s: no generation took this learner in time; leaving", self.slot)
        return None

    def orphaned(self) -> bool:
        """The process that started this learner is gone (a slot worker killed, say)."""
        try:
            os.kill(self.parent_pid, 0)
            return False
        except PermissionError:  # sandboxed: it runs as another user, and it is there
            return False
        except ProcessLookupError:
            log.warning("%s: the process that started this learner is gone; leaving", self.slot)
            return True

    def form_group(self, gen: int) -> None:
        """Take generation ``gen``: its rank and size, its process group; as its rank 0,
        the watch on the job's control and the generation marked adopted."""
        members = self.jobs.members(gen)
        self.gen, self.rank, self.size = gen, members.index(self.slot), len(members)
        self.hosts = len({member.rpartition(".")[0] for member in members})
        timeout = datetime.timedelta(seconds=self.spec.collective_timeout)
        store = dist.PrefixStore(f"gen{gen}", self.rdv)  # type: ignore[attr-defined]
        try:
            if self.device.type == "cuda":
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                self.pg = dist.ProcessGroupNCCL(store, self.rank, self.size, options)
            else:
                if self.gloo is None:
                    self.gloo = gloo_options(self.redis_url, timeout)
                self.pg = dist.ProcessGroupGloo(store, self.rank, self.size, self.gloo)
        except Exception as exc:
            raise CollectiveFailure(f"could not form generation {gen}: {exc}") from exc
        if self.rank == 0:
            self.watch.latest = (gen, False)
            self.watch.active.set()
            self.jobs.adopt(gen)
        else:
            self.watch.active.clear()

    def leave_group(self) -> bool:
        """Free the failed generation's group now (the caller has let go of everything
        else that held it): its connections close, so that a peer still waiting on this
        learner in a collective raises at once rather than at its timeout
        (docs/architecture.md, "Elastic training protocol"). False when something still
        holds it."""
        pg, self.pg = self.pg, None
        if pg is None:
            return True
        held = weakref.ref(pg)
        del pg
        gc.collect()  # a cycle through a failed step's frames, or its works'
        return held() is None

    def collective(self, op: str, tensor: torch.Tensor, **kw: Any) -> None:
        try:
            if op == "allreduce":
                opts = dist.AllreduceOptions()
                opts.reduceOp = kw.get("reduce", dist.ReduceOp.SUM)
                self.pg.allreduce([tensor], opts).wait()
            else:
                opts_b = dist.BroadcastOptions()
                opts_b.rootRank = 0
                self.pg.broadcast([tensor], opts_b).wait()
        except Exception as exc:
            raise CollectiveFailure(str(exc)) from exc

    def agreement_host(self, written: int) -> tuple[float, float, float]:
        """Rank 0's part of the agreement, from the watch thread (no Redis in the step),
        never behind the generation this learner already formed: generation, stop flag,
        ``written`` (the last step its record writer saw Redis take). Zeros from the other
        ranks: the all-reduce's sum is rank 0's."""
        if self.rank != 0:
            return 0.0, 0.0, 0.0
        gen, stop = self.watch.latest
        return float(max(gen, self.gen)), float(stop), float(written)
