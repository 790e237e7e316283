"""Several worker hosts for real: each in a Linux network namespace of its own, joined to
the test's root namespace by a veth pair on a bridge (a private /24), with Redis listening
on the bridge's address. A job trains across two hosts over gloo; then one host is killed
(kill -9 of every process in its namespace) and another partitioned (its link down for
20 s). The job must shrink once the host's heartbeat and leases lapse, go on, grow back when
the host returns, and end COMPLETED with every step's metric exactly once through the API.

Needs root and iproute2's ``ip``; skipped, saying so, where namespaces cannot be created.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.conf import settings as django_settings

from edtweb.redis_server import RedisServer
from edtweb.training import services
from edtweb.training.live_adapter import runner_for
from edtweb.training.models import Job
from protocol.keys import ALIVE
from scheduler import elastic
from scheduler.elastic import Action, Control, Learners, Publish, Seen
from scheduler.phases import JobPhase
from scheduler.store import Store
from tests.harness.api import api_steps
from tests.harness.cluster import Watch, live_env
from tests.harness.jobs import completed, redone, workers_of
from tests.harness.processes import PROJECT_DIR, Processes
from tests.harness.waiting import wait_for
from workers.learner.datasets import write_cifar10

# Redis on the bridge, where the namespaced hosts reach it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis("redis_on_bridge")]

PREFIX = "edtn"  # namespaces and links: edtn<pid><letter>, the bridge edtn<pid>br
TTL = int(django_settings.EDT_HEARTBEAT_TTL)
PARTITION_SECONDS = 20.0
COLLECTIVE_TIMEOUT = 8.0  # how long a survivor waits on a peer that stopped answering


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip ARGS`; with ``check``, its failure fails the test, saying what `ip` said."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    assert not check or done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"
    return done


@dataclass
class Host:
    """A worker host's namespace: its link's root end and its address."""

    name: str  # the namespace's, and the worker host's --host-name
    link: str  # the veth end in the root namespace (on the bridge)
    address: str

    def pids(self) -> list[int]:
        out = ip("netns", "pids", self.name, check=False).stdout
        return [int(p) for p in out.split()]


class Network:
    """A bridge in the root namespace and one namespace per host, each on a veth pair."""

    def __init__(self, hosts: int) -> None:
        tag = f"{PREFIX}{os.getpid()}"
        self.bridge = f"{tag}br"
        subnet = free_subnet()
        addresses = list(subnet.hosts())
        self.gateway = str(addresses[0])
        self.prefix = subnet.prefixlen
        self.hosts = [
            Host(f"{tag}{chr(97 + i)}", f"{tag}{chr(97 + i)}", str(addresses[1 + i]))
            for i in range(hosts)
        ]

    def create(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/{self.prefix}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for host in self.hosts:
            ip("netns", "add", host.name)
            ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0",
               "netns", host.name)  # fmt: skip
            ip("link", "set", host.link, "master", self.bridge)
            ip("link", "set", host.link, "up")
            ip("-n", host.name, "addr", "add", f"{host.address}/{self.prefix}", "dev", "eth0")
            ip("-n", host.name, "link", "set", "eth0", "up")
            ip("-n", host.name, "link", "set", "lo", "up")

    def destroy(self) -> None:
        """Kill what runs in the namespaces, then remove them, their links and the bridge;
        whatever part of them exists."""
        for host in self.hosts:
            kill_all(host)
            ip("link", "del", host.link, check=False)
            ip("netns", "del", host.name, check=False)
        ip("link", "del", self.bridge, check=False)

    def leftovers(self) -> list[str]:
        names = {self.bridge} | {h.name for h in self.hosts} | {h.link for h in self.hosts}
        listed = ip("-o", "link", "show", check=False).stdout + ip("netns", "list").stdout
        return sorted(n for n in names if re.search(rf"\b{n}\b", listed))

    def cut(self, host: Host) -> None:
        ip("link", "set", host.link, "down")

    def restore(self, host: Host) -> None:
        ip("link", "set", host.link, "up")


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 that no interface here uses."""
    used = ip("-4", "-o", "addr", "show", check=False).stdout
    for third in [os.getpid() % 250 + 1, *range(1, 251)]:
        net = ipaddress.IPv4Network(f"10.213.{third}.0/24")
        if f"10.213.{third}." not in used:
            return net
    raise RuntimeError("no free 10.213.x.0/24 here")


def kill_all(host: Host) -> None:
    """kill -9 of every process in the host's namespace, until none is left."""
    deadline = time.monotonic() + 30
    while (pids := host.pids()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def remove_stale_networks() -> None:
    """Namespaces and links an earlier run left behind when it was killed itself."""
    listed = ip("netns", "list", check=False).stdout + ip("-o", "link", "show", check=False).stdout
    for name in set(re.findall(rf"\b({PREFIX}(\d+)[a-z]+)\b", listed)):
        full, pid = name
        if not psutil.pid_exists(int(pid)):
            ip("link", "del", full, check=False)
            ip("netns", "del", full, check=False)


def namespaces_refused() -> str | None:
    """Why this machine does not let the tests create a network namespace (a container
    without CAP_SYS_ADMIN, say), or None when it does: the one case that skips."""
    probe = f"{PREFIX}{os.getpid()}probe"
    ip("netns", "del", probe, check=False)  # one a run of the same pid left
    made = ip("netns", "add", probe, check=False)
    said = made.stderr.strip()
    if made.returncode != 0 and re.search("not permitted|permission denied", said, re.I):
        return f"network namespaces cannot be created here: ip netns add: {said}"
    assert made.returncode == 0, f"ip netns add failed, not for want of permission: {said}"
    ip("netns", "del", probe)
    return None


@pytest.fixture
def network() -> Iterator[Network]:
    """Two hosts' namespaces; always removed, whatever the test did."""
    why = None
    if os.geteuid() != 0:
        why = "network namespaces cannot be created: the tests do not run as root"
    elif shutil.which("ip") is None:
        why = "network namespaces cannot be created: no `ip` (iproute2) here"
    else:
        why = namespaces_refused()
    if why:
        pytest.skip(why)
    remove_stale_networks()
    net = Network(hosts=2)
    try:
        net.create()  # permitted here: any command of it that fails is the test's failure
        yield net
    finally:
        net.destroy()
        left = net.leftovers()
        assert not left, f"namespaces or links left behind: {left}"


@pytest.fixture
def redis_on_bridge(network: Network, tmp_path: Path) -> Iterator[RedisServer]:
    """Redis on the bridge's address: reachable from the root namespace and every host."""
    password = "test-" + secrets.token_hex(8)
    server = RedisServer(tmp_path / "redis", appendonly=False, password=password,
                         host=network.gateway, dies_with_parent=True).start()  # fmt: skip
    yield server
    server.stop()


class Hosts:
    """Worker hosts, each run inside its own namespace as ``edt_worker`` is on a machine."""

    def __init__(self, redis: RedisServer, store: Store, processes: Processes, tmp: Path) -> None:
        self.store, self.processes, self.tmp = store, processes, tmp
        self.env = live_env(redis)
        self.starts = 0

    def start(self, host: Host) -> subprocess.Popen[str]:
        self.starts += 1
        log = (self.tmp / f"{host.name}-{self.starts}.log").open("w")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host.name, sys.executable, "manage.py", "edt_worker",
             "--cpu-slots", "1", "--host-name", host.name, "--restart-delay", "1"],
            cwd=PROJECT_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.processes.started.append(proc)
        return proc

    def warm(self, host: Host) -> bool:
        return any(
            s.host == host.name and s.state == ALIVE and bool(s.telemetry.get("warm"))
            for s in self.store.list_slots()
        )


def learners_in(host: Host) -> set[int]:
    """Its learner processes (user code runs as a user of its own, not root)."""
    found = set()
    for pid in host.pids():
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).uids().real != 0:
                found.add(pid)
    return found


def members(job: Job) -> list[str]:
    """The slots of the job's latest published generation."""
    jobs = services.job_store(job.pk)
    return jobs.members(jobs.generation())


def steps_done(job: Job) -> int:
    return Job.objects.get(pk=job.pk).steps_done


def trained_in(job: Job, gen: int) -> bool:
    """A step of generation ``gen`` or later is in the job's stream: its members hold the
    job's state (a generation's state broadcast comes before its first step)."""
    return any(r.get("type") == "train" and r.get("gen", 0) >= gen
               for _, r in services.job_store(job.pk).read_metrics())  # fmt: skip


def on(host: Host, slots: list[str]) -> bool:
    return any(s.startswith(f"{host.name}.") for s in slots)


@pytest.mark.timeout(600)  # two hosts start twice and the partition lasts 20 s, on 2 cores
def test_a_job_across_two_namespaced_hosts_survives_a_killed_and_a_partitioned_host(
    network: Network,
    redis_on_bridge: RedisServer,
    store: Store,
    processes: Processes,
    alice: Any,
    tmp_path: Path,
) -> None:
    a, b = network.hosts
    hosts = Hosts(redis_on_bridge, store, processes, tmp_path)
    for host in (a, b):
        hosts.start(host)
    wait_for(lambda: hosts.warm(a) and hosts.warm(b), 240, "both hosts' slots warm")
    scheduler = processes.manage("edt_scheduler", env=hosts.env, log=tmp_path / "scheduler.log")
    metrics = processes.manage("edt_metrics", env=hosts.env, log=tmp_path / "metrics.log")
    data = write_cifar10(tmp_path / "data", train=640, test=64)
    model = tmp_path / "model" / "throttled_mlp.py"
    model.parent.mkdir()
    shutil.copy(PROJECT_DIR / "tests" / "models" / "throttled_mlp.py", model)
    pace = model.with_name("pace")
    pace.write_text("0.1")  # slow while the faults go on; full speed after
    pace.chmod(0o644)
    epochs = 60  # 600 steps: far more than the faults take at this pace
    job = services.submit_job(alice, name="across hosts", model_path=str(model),
                              data_path=str(data), epochs=epochs, batch_size=64,
                              max_workers=2, collective_timeout=COLLECTIVE_TIMEOUT)  # fmt: skip
    total = epochs * 640 // 64
    wait_for(lambda: workers_of(job) == 2, 180, "the job on both hosts")
    assert on(a, members(job)) and on(b, members(job)), members(job)
    start = steps_done(job)
    wait_for(lambda: steps_done(job) >= start + 5, 120, "5 steps across the hosts")
    watch = Watch(job, lambda: learners_in(a) | learners_in(b))  # RUNNING with no learner
    timings: dict[str, float] = {}

    # (a) Host a dies: every process in its namespace, kill -9.
    killed_at = time.monotonic()
    kill_all(a)
    wait_for(lambda: members(job) and not on(a, members(job)), TTL + 30,
             "a generation without the killed host")  # fmt: skip
    timings["killed: survivors' generation published"] = time.monotonic() - killed_at
    wait_for(lambda: workers_of(job) == 1, 60, "the survivor training alone")
    timings["killed: survivor trains alone"] = time.monotonic() - killed_at
    done = steps_done(job)
    wait_for(lambda: steps_done(job) >= done + 3, 60, "training to go on without host a")
    back_at = time.monotonic()
    hosts.start(a)  # the machine is back
    wait_for(lambda: workers_of(job) == 2 and on(a, members(job)), 240, "the job back on a")
    timings["killed: grown back after the restart"] = time.monotonic() - back_at

    # (b) Host b's link goes down for 20 s: it and its learner are partitioned away, during
    # training: once the joiner on a holds the job's state. Cut while a was still receiving
    # it, the only whole copy would go with b, and a would rightly go back to the last
    # checkpoint (CI saw 9 iterations redone that way).
    regrown = services.job_store(job.pk).generation()
    wait_for(lambda: trained_in(job, regrown), 60, "a step on both hosts again")
    jobs = services.job_store(job.pk)
    slot_b = next(s for s in members(job) if on(b, [s]))
    token = jobs.dispatches()[slot_b]
    stale = learners_in(b)
    assert stale, "no learner process found on host b"
    gen_before = jobs.generation()
    cut_at = time.monotonic()
    network.cut(b)
    try:
        wait_for(lambda: members(job) and not on(b, members(job)), TTL + 30,
                 "a generation without the partitioned host")  # fmt: skip
        timings["partitioned: survivors' generation published"] = time.monotonic() - cut_at
        wait_for(lambda: workers_of(job) == 1, COLLECTIVE_TIMEOUT + 30, "host a alone")
        timings["partitioned: survivor trains alone"] = time.monotonic() - cut_at
        done = steps_done(job)
        wait_for(lambda: steps_done(job) >= done + 3, 60, "training on during the partition")
        assert time.monotonic() - cut_at < PARTITION_SECONDS, "too slow to test a partition"
        time.sleep(max(0.0, PARTITION_SECONDS - (time.monotonic() - cut_at)))  # the fault
    finally:
        network.restore(b)
    restored_at = time.monotonic()
    gen_alone = jobs.generation()
    # Its learner comes back with a generation that is no longer the job's: it must leave.
    wait_for(lambda: not any(psutil.pid_exists(p) for p in stale), 120,
             "the partitioned learner to leave")  # fmt: skip
    timings["partitioned: stale learner gone after the link returned"] = (
        time.monotonic() - restored_at)  # fmt: skip
    wait_for(lambda: workers_of(job) == 2 and on(b, members(job)), 240, "the job back on b")
    timings["partitioned: grown back after the link returned"] = time.monotonic() - restored_at
    assert jobs.dispatches()[slot_b] != token, "the stale learner was taken back"

    pace.write_text("0")
    wait_for(lambda: completed(job), 300, "the job to complete")
    longest = watch.stop()
    assert longest <= 60, f"the job was RUNNING without a learner for {longest:.0f} s"
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()})
    if os.environ.get("EDT_RECOVERY_TIMINGS"):  # bench/bench_recovery.py tabulates them
        Path(os.environ["EDT_RECOVERY_TIMINGS"]).write_text(json.dumps(timings))
    assert api_steps(job) == list(range(1, total + 1)), "a step lost or repeated"
    assert redone(job) <= 2, f"{redone(job)} iterations redone after 2 faults"
    assert gen_alone > gen_before
    for host in (a, b):
        assert hosts.warm(host), f"host {host.name} is not serving again"
    assert scheduler.poll() is None and metrics.poll() is None, "a platform process died"


# The scheduler's side of a lost host, without namespaces -----------------------------------


def running(members: tuple[str, ...], target: int, gone: frozenset[str] = frozenset(),
            waiting_on_dead: float = elastic.FAILURE_GRACE_SECONDS) -> Control:  # fmt: skip
    """A controller whose job trains on ``members`` (generation 1, adopted); the learners
    on ``gone`` slots are gone (their leases lapsed)."""
    sent = Learners(tokens=dict.fromkeys(members, "t"), gone=gone)
    return Control(phase=JobPhase.TRAINING, target=target, members=members, learners=sent,
                   started=frozenset(members), waiting_on_dead=waiting_on_dead)  # fmt: skip


def published(actions: list[Action]) -> list[tuple[str, ...]]:
    return [a.members for a in actions if isinstance(a, Publish)]


def never(_: object = None) -> str:
    raise AssertionError("no learner is started here")


def test_a_shrink_while_a_host_is_lost_keeps_the_member_that_still_trains() -> None:
    """Host b (rank 0) is cut off; its slot's heartbeat lapses before any collective fails,
    so the job shrinks 2 -> 1: the member kept must be a's, not the lost one."""
    seen = Seen(generation=1, adopted=1)
    _, actions, _ = elastic.tick(running(("b.0", "a.0"), 1), seen, {"a.0"}, never)
    assert published(actions) == [("a.0",)]
    # Every slot alive: the most recently joined leaves, as before.
    _, actions, _ = elastic.tick(running(("a.0", "b.0", "c.0"), 2), seen, None, never)
    assert published(actions) == [("a.0", "b.0")]


def test_a_member_waiting_on_a_cut_off_peer_is_kept_until_its_collective_times_out() -> None:
    """Host b is cut off: its learner's lease lapses while a's learner, alive, waits on it
    in a collective until the job's collective timeout. a must survive, not be taken for
    lost after a second of silence (which restarted the job from its checkpoint)."""
    c = running(("b.0", "a.0"), 2, gone=frozenset({"b.0"}), waiting_on_dead=8.0 + 1.0)
    seen = Seen(generation=1, adopted=1, now=100.0)
    c, actions, _ = elastic.tick(c, seen, None, never)
    assert c.failure_since == 100.0 and published(actions) == [], "b's loss not noticed"
    c, actions, _ = elastic.tick(c, replace(seen, now=105.0), None, never)  # a still waits
    assert published(actions) == [] and c.members == ("b.0", "a.0")
    report = {"slot": "a.0", "gen": 1, "step": 10, "error": "timed out waiting 8000ms for recv"}
    c, actions, _ = elastic.tick(c, replace(seen, now=105.5, failures=(report,)), None, never)
    assert published(actions) == [("a.0",)] and c.members == ("a.0",)


def test_a_silent_member_that_renews_its_lease_is_waited_for_and_a_frozen_one_is_not() -> None:
    """c reported its collective's failure; b, frozen, renews nothing (its lease went
    missing) and is the suspect; a still renews its lease: it waits in the same collective,
    entered later, and its own timeout comes later (rank 0 broadcasting the state to a
    joiner, say). a is waited for (up to the collective timeout), not dropped with b after
    the grace; once it reports, b alone is lost."""
    grace = elastic.FAILURE_GRACE_SECONDS
    three = ("a.0", "b.0", "c.0")
    sent = Learners(tokens=dict.fromkeys(three, "t"), leased=frozenset(three),
                    missing_since={"b.0": 99.0})  # fmt: skip
    c = replace(running(("a.0", "b.0", "c.0"), 3, waiting_on_dead=8.0 + grace), learners=sent)
    report = {"slot": "c.0", "gen": 1, "step": 10, "error": "timed out waiting 8000ms for recv"}
    seen = Seen(generation=1, adopted=1, now=100.0, failures=(report,))
    c, actions, _ = elastic.tick(c, seen, None, never)
    c, actions, _ = elastic.tick(c, replace(seen, now=100.0 + grace + 1), None, never)
    assert published(actions) == [] and c.members == ("a.0", "b.0", "c.0"), "a dropped"
    late = {**report, "slot": "a.0"}
    c, actions, _ = elastic.tick(c, replace(seen, now=100.0 + grace + 2,
                                            failures=(report, late)), None, never)  # fmt: skip
    assert published(actions) == [("a.0", "c.0")]
    # With a's lease missing too, both silent members are suspects after the grace.
    sent = replace(sent, missing_since={"a.0": 99.0, "b.0": 99.0})
    c = replace(running(("a.0", "b.0", "c.0"), 3, waiting_on_dead=8.0 + grace), learners=sent)
    c, actions, _ = elastic.tick(c, seen, None, never)
    c, actions, _ = elastic.tick(c, replace(seen, now=100.0 + grace + 1), None, never)
    assert published(actions) == [("c.0",)]


def test_a_member_that_reported_the_generation_before_is_a_survivor() -> None:
    """b froze as generation 2 was being replaced by 3 (a joiner, c): a, rank 0, was still
    in generation 2's collective with b and reports that one's failure; c cannot form
    generation 3 without a and reports it. a is alive and holds the state: b alone is
    lost (test_input's kill-then-freeze run dropped a with b)."""
    members = ("a.0", "b.0", "c.0")
    c = running(members, 3, waiting_on_dead=8.0 + elastic.FAILURE_GRACE_SECONDS)
    reports = (
        {"slot": "a.0", "gen": 2, "step": 31, "error": "timed out"},
        {"slot": "c.0", "gen": 3, "step": 16, "error": "could not form generation 3"},
    )
    seen = Seen(generation=3, adopted=2, now=100.0, failures=reports)
    c, actions, _ = elastic.tick(c, seen, None, never)
    later = replace(seen, now=100.0 + elastic.FAILURE_GRACE_SECONDS + 1)
    c, actions, _ = elastic.tick(c, later, None, never)
    assert published(actions) == [("a.0", "c.0")]
    # A report of an earlier generation alone is no failure of this one.
    c, actions, _ = elastic.tick(running(members, 3), replace(seen, failures=reports[:1]),
                                 None, never)  # fmt: skip
    assert published(actions) == [] and c.failure_since is None


def test_a_suspending_job_starts_no_joiner(redis_server: RedisServer, alice: Any,
                                           tmp_path: Path) -> None:  # fmt: skip
    """Its learners are checkpointing to leave: a joiner would see the stop flag, exit at
    once, and be sent again on the next tick, for as long as the suspension takes."""
    data = write_cifar10(tmp_path / "data", train=64, test=64)
    model = PROJECT_DIR / "tests" / "models" / "paced_mlp.py"
    job = services.submit_job(alice, name="suspending", data_path=str(data),
                              model_path=str(model))  # fmt: skip
    runner = runner_for(job, resume=False)
    runner.state = replace(runner.state, phase=JobPhase.SUSPENDING)
    runner.apply(1, ("a.0",), ())
    assert runner.jobs.dispatches() == {}
    assert runner.target == 0


def test_a_learner_listens_on_the_address_it_reaches_redis_from(network: Network) -> None:
    """Not on what the host name resolves to (127.0.0.1 here, in every namespace)."""
    probe = (
        "import os\n"
        "from workers.learner.rendezvous import learner_address as at\n"
        f"print(at('redis://:pw@{network.gateway}:6379/0'), at('redis://127.0.0.1:6379/0'))\n"
        "os.environ['EDT_LEARNER_ADDRESS'] = '192.0.2.7'\n"
        f"print(at('redis://:pw@{network.gateway}:6379/0'))\n"
    )
    host = network.hosts[0]
    out = subprocess.run(["ip", "netns", "exec", host.name, sys.executable, "-c", probe],
                         cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.stdout.split() == [host.address, "None", "192.0.2.7"], out.stderr
