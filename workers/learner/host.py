"""The slot's side of a learner: start it as a child process, watch it, clean up after it.

Runs inside the slot's Celery worker (the ``run_learner`` task). The learner gets its own
session (so it can be killed as a group), a scrubbed environment with no secrets of the
platform, and enters the sandbox (``workers/sandbox.py``: its dataset and model read-only,
its job directory read-write, nothing else of the data directory, limits, an unprivileged
user) before the user's code is imported. Its stdout and stderr go to the job's log for this
slot. The fork server it comes from is a subreaper: whatever the learner started, ``setsid``
or not, is killed when it ends.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import re
import signal
import socket
import sys
import time
import types
from dataclasses import dataclass
from multiprocessing import connection, forkserver, resource_tracker
from pathlib import Path
from typing import Any

from protocol import redis_acl
from protocol.connection import url_files
from protocol.exits import Exit
from protocol.jobstore import JobStore
from workers import sandbox
from workers.deployment import redis_refusal
from workers.learner import zygote
from workers.learner.allocator import HUGE_PAGES, huge_pages

# The last line of a Python traceback: "SomeError: what happened".
ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b")

log = logging.getLogger("edt.learner.host")

PROJECT_DIR = Path(__file__).resolve().parents[2]
PASSED_THROUGH = (
    "PATH", "LANG", "LC_ALL", "TZ", "HOME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS", "EDT_TORCH_THREADS", "GLOO_SOCKET_IFNAME", "EDT_LEARNER_ADDRESS",
    HUGE_PAGES,
)  # fmt: skip
STALE = Exit.STALE
NO_SANDBOX = 3  # exit status of a learner whose sandbox could not be set up
REFUSED = Exit.REFUSED


def learner_env(redis_url: str, base: dict[str, str]) -> dict[str, str]:
    """Only what a learner needs: no SECRET_KEY, DATABASE_URL or other platform secrets."""
    return {**passed_env(base), "REDIS_URL": redis_url}


def passed_env(base: dict[str, str]) -> dict[str, str]:
    """What of ``base`` a process running learners' code is given (a learner less its
    Redis URL, the host's learner zygote): none of the platform's secrets."""
    env = {k: v for k, v in base.items() if k in PASSED_THROUGH or k.startswith("NCCL_")}
    env.update(PYTHONPATH=str(PROJECT_DIR), PYTHONUNBUFFERED="1")
    env.setdefault("EDT_TORCH_THREADS", "1")
    huge_pages(env)
    return env


# Learners fork from a server that imported torch and the learner already: a joiner is
# READY in well under a second instead of paying torch's import (seconds on a busy host).
_forkserver = multiprocessing.get_context("forkserver")
PRELOAD = ["torch", "workers.learner.__main__", "workers.learner.warmup"]  # warmup: subreaper


def _set_up_forkserver(wait: float = 5.0) -> None:
    """Called before each use of the fork server. Its first use starts it with this
    process's environment, and every learner it forks allocates as it was started to: so
    that environment asks for huge pages (allocator.py). A slot worker's has it from its
    launcher already; this sets it for other callers (benchmarks, tests). A slot worker
    whose host runs a learner zygote (``zygote.ZYGOTE_ENV``) has its fork server forked
    from that instead of started anew (zygote.py), waiting ``wait`` seconds at most for a
    zygote that is starting."""
    huge_pages(os.environ)
    _forkserver.set_forkserver_preload(PRELOAD)
    path = os.environ.get(zygote.ZYGOTE_ENV)
    if path and fork_server_pid() is None:
        _from_zygote(path, wait)


def _from_zygote(path: str, wait: float, server: Any = None) -> bool:
    """This process's fork server (``server``: multiprocessing's), forked by the host's
    zygote at ``path`` from the two ends the stock start would give a new interpreter
    (``ForkServer.ensure_running``). False, and nothing changed, when the zygote does not
    answer within ``wait`` seconds, or on a Python whose fork server authenticates its
    clients."""
    server = forkserver._forkserver if server is None else server
    if hasattr(server, "_forkserver_authkey"):
        return False
    with server._lock:
        if server._forkserver_pid is not None:
            return True
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        alive_r, alive_w = os.pipe()
        try:
            with socket.socket(socket.AF_UNIX) as listener:
                listener.bind(address)
                os.chmod(address, 0o600)
                listener.listen()
                pid = zygote.ask(path, listener.fileno(), alive_r, wait)
        except OSError as exc:
            os.close(alive_w)
            log.warning("the learner zygote at %s did not answer (%s): this slot's fork "
                        "server starts on its own", path, exc)  # fmt: skip
            return False
        finally:
            os.close(alive_r)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
        server.ensure_running = types.MethodType(_ensure_zygote_child, server)
    return True


def _ensure_zygote_child(server: Any) -> None:
    """``ForkServer.ensure_running`` for a fork server the zygote forked: not this
    process's child, so it is looked at in /proc instead of waited for; one that ended is
    forgotten, and the next start is the stock one."""
    with server._lock:
        resource_tracker.ensure_running()
        pid = server._forkserver_pid
        if pid is not None and sandbox.running(pid):
            return
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)
        server._forkserver_address = server._forkserver_alive_fd = None
        server._forkserver_pid = None
        del server.ensure_running  # the class's again
    server.ensure_running()


def prewarm() -> None:
    """Start the fork server now (the slot worker calls this once it is ready; its host's
    zygote, if any, may still be starting)."""
    _set_up_forkserver(zygote.READY_SECONDS)
    probe = _forkserver.Process(target=_noop)
    probe.start()
    probe.join()


def _noop() -> None:
    return None


def _learner_child(argv: list[str], env: dict[str, str], log_path: str, policy: str) -> None:
    """In the forked learner: own session, scrubbed environment, log file, then the sandbox."""
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    path = Path(log_path)  # in the job directory, which the learner owns: follow no link
    fd = sandbox.open_beneath(path.parent.parent, f"{path.parent.name}/{path.name}", append=True)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    try:
        sandbox.enter(sandbox.Policy.loads(policy))
    except (sandbox.SandboxError, OSError) as exc:
        print(f"the learner's sandbox could not be set up: {exc}", flush=True)
        os._exit(NO_SANDBOX)
    from workers.learner.__main__ import main

    sys.exit(main(argv))


@dataclass(frozen=True)
class JobPaths:
    """A job's paths as the platform recorded them (the database), never as read from its
    job directory: its learners own that directory and could rewrite ``spec.json`` to name
    any path (another job's, the data directory itself) for the next learner's sandbox."""

    data: Path
    model: Path
    workdir: Path


def learner_policy(paths: JobPaths, redis_url: str = "") -> sandbox.Policy:
    """Its dataset and model code read-only, its job directory read-write, the files its
    Redis URL names (a socket, a CA file) read-only; the slot's memory limit
    (``EDT_SLOT_INDEX`` and ``EDT_SLOT_DEVICE`` are set by the launcher)."""
    index = os.environ.get("EDT_SLOT_INDEX", "")
    memory = sandbox.memory_limit(
        int(index) if index.isdigit() else None, os.environ.get("EDT_SLOT_DEVICE", "cpu")
    )
    read = [paths.data, paths.model.parent, *(url_files(redis_url) if redis_url else [])]
    return sandbox.policy(read=read, write=[paths.workdir], memory=memory)


def fork_learner(spec: Path, paths: JobPaths, slot: str, redis_url: str, log_path: Path) -> Any:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    policy = learner_policy(paths, redis_url)
    env = learner_env(redis_url, dict(os.environ))
    env.update(HOME=str(paths.workdir), TMPDIR="/tmp")
    env["EDT_WATCH_PID"] = str(os.getpid())  # the learner leaves if this slot worker dies
    argv = ["--spec", str(spec), "--slot", slot]
    _set_up_forkserver()
    proc = _forkserver.Process(
        target=_learner_child, args=(argv, env, str(log_path), policy.dumps())
    )
    proc.start()
    return proc


def signal_learner(pid: int, sig: int) -> None:
    """Signal the learner's process group; the learner alone while it has none yet (a kill
    asked for as it starts arrives before its ``setsid``, and must not be lost)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def fork_server_pid() -> int | None:
    """The pid of this process's fork server (the slots' and the drive's), None before it starts."""
    return forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined,no-any-return]


def run_learner(
    jobs: JobStore,
    slot: str,
    token: str,
    spec: Path,
    redis_url: str,
    secret: str = "",
    paths: JobPaths | None = None,
) -> int:
    """Run one learner of the job on this slot until it exits; returns its exit status.
    With the platform's ``secret``, the learner reaches Redis as its job's ACL user only.
    ``paths`` (from the database) bound what it can reach: required to start one. None
    starts where Redis lets anyone in (``workers/deployment.py``): the exit reported then
    says why, and the job fails with it after a few."""
    if jobs.dispatch_token(slot) != token:
        log.info("job %s on %s: stale dispatch token; not starting", jobs.job_id, slot)
        return STALE
    if paths is None:
        raise ValueError("a learner needs its job's paths from the database")
    refusal = redis_refusal(redis_url)
    if refusal:
        return refuse(jobs, slot, token, refusal, paths.workdir / "logs" / f"{slot}.log")
    if secret:
        redis_url = redis_acl.grant(jobs.r, redis_url, jobs.job_id, secret)
    log_path = paths.workdir / "logs" / f"{slot}.log"
    cap = log_cap()
    cut_log(log_path, cap)  # the slot's earlier learners wrote to it too
    proc = fork_learner(spec, paths, slot, redis_url, log_path)
    looked = time.monotonic()
    while proc.exitcode is None:
        sig = jobs.kill_requested(slot)
        if sig is not None:
            jobs.clear_kill(slot)
            signal_learner(proc.pid, sig)
        proc.join(0.1)
        if time.monotonic() - looked >= 1.0:
            looked = time.monotonic()
            cut_log(log_path, cap)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    server = fork_server_pid()
    if server is not None:  # anything the learner started, setsid or not, goes with it
        killed = sandbox.kill_children(server)
        if killed:
            log.info("job %s on %s: killed %d leftover process(es)", jobs.job_id, slot, killed)
    code = int(proc.exitcode)
    detail = "" if code in (Exit.FINISHED, Exit.USER_CODE_FAILED) else last_error(log_path, code)
    jobs.report_exit(slot, code, token, detail)
    return code


def log_cap() -> int:
    """Bytes a learner's log may reach before it is cut (``EDT_LEARNER_LOG_SIZE``)."""
    return sandbox.parse_size(os.environ.get("EDT_LEARNER_LOG_SIZE") or "32m")


def keep_log_under(log_path: Path, cap: int) -> bool:
    """When the learner's log passed ``cap`` bytes, its last ``cap`` bytes go to
    ``<log>.1`` (the one earlier part kept) and it starts again empty, as logrotate's
    copytruncate does: the learner goes on appending to the same file. No learner, however
    much it prints, and no crash loop, however long, fills a disk: a slot keeps at most
    about twice ``cap`` of logs per job. The job directory is the learner's: nothing
    here follows a link it may have put there. True when it was cut."""
    root, name = log_path.parent.parent, f"{log_path.parent.name}/{log_path.name}"
    try:
        fd = sandbox.open_beneath(root, name)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size <= cap:
            return False
        tail = os.pread(fd, cap, size - cap)
    finally:
        os.close(fd)
    kept = sandbox.open_beneath(root, name + ".1", append=True)
    try:
        os.ftruncate(kept, 0)
        os.write(kept, tail)
    finally:
        os.close(kept)
    log_fd = sandbox.open_beneath(root, name, append=True)
    try:
        os.ftruncate(log_fd, 0)
        note = f"[edt] this log passed {cap} bytes: its last {cap} are in {log_path.name}.1\n"
        os.write(log_fd, note.encode())
    finally:
        os.close(log_fd)
    return True


def cut_log(log_path: Path, cap: int) -> None:
    """:func:`keep_log_under`, which a log the learner made something else (a link, a
    directory) never stops: it is said in the slot's log and the learner goes on."""
    try:
        keep_log_under(log_path, cap)
    except OSError as exc:
        log.warning("could not keep %s under %d bytes: %s", log_path, cap, exc)


def refuse(jobs: JobStore, slot: str, token: str, reason: str, log_path: Path) -> int:
    """Start no learner: say why in the log, in the slot's learner log and in the exit
    reported, so that the scheduler moves on."""
    log.error("job %s on %s: %s", jobs.job_id, slot, reason)
    with contextlib.suppress(OSError):  # the job's directory is its learners': follow no link
        log_path.parent.mkdir(parents=True, exist_ok=True)
        relative = f"{log_path.parent.name}/{log_path.name}"
        fd = sandbox.open_beneath(log_path.parent.parent, relative, append=True)
        with os.fdopen(fd, "a") as out:
            out.write(f"EDT: {reason}\n")
    jobs.report_exit(slot, REFUSED, token, reason)
    return REFUSED


def last_error(log_path: Path, code: int) -> str:
    """What a learner that failed before it could report (it could not reach Redis, its
    spec was gone, it was killed) printed last: the final exception line of its log, else
    its last line, else how it ended."""
    try:
        with log_path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines()]
    except OSError:
        lines = []
    lines = [line for line in lines if line]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    if errors:
        return errors[-1]
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return lines[-1] if lines else f"exit status {code}"
