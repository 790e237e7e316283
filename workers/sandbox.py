"""Where untrusted model code runs: the one sandbox of learners and of the model check.

User code (a learner, or ``python -m workers.learner.validate``) is entered into the sandbox
by :func:`enter`, in the child process, before anything of the user's is imported:

1. a private mount namespace (when EDT runs as root): the data directory and the data
   roots are replaced by empty read-only tmpfs in which only the code's own paths appear
   again, bind-mounted (its dataset and model read-only, its job directory read-write);
   ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are private, size-capped tmpfs. The secret key,
   the database, the admin password, Redis' files, other jobs and other datasets (uploaded
   or in place) are simply not there;
2. resource limits: address space (per slot), processes, file size, open files, no core
   dumps, CPU time for the model check;
3. an unprivileged user (``EDT_LEARNER_USER``, else the system user ``edt-learner``, created
   on first use): it cannot read ``/etc/shadow`` nor any platform process's
   ``/proc/PID/environ``, and cannot signal or trace them; ``no_new_privs`` is set.

The process tree is removed whole: the process that starts user code is a *subreaper*
(``PR_SET_CHILD_SUBREAPER``), so every descendant, ``setsid`` ones included, stays its
descendant whatever it does, and :func:`kill_children` kills them all at the end.

Why this and not ``bwrap``: a learner forks from a per-slot server that has imported torch
(a learner is READY in well under a second). ``bwrap`` sandboxes a program it executes, so a
learner would pay a fresh interpreter and torch's import (seconds) again. The same kernel
calls made in the forked child cost a few milliseconds (``bench/bench_sandbox.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import logging
import os
import pwd
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("edt.sandbox")

DEFAULT_USER = "edt-learner"
OPT_OUT_USER = "root"  # EDT_LEARNER_USER=root: user code runs as root (development only)
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
OUT_OF_MEMORY = "out of memory in your code"
OUT_OF_PROCESSES = "could not start a thread or process in your job"

# <linux/sched.h>, <sys/mount.h>, <linux/prctl.h>
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(RuntimeError):
    """The sandbox could not be set up: user code must not run."""


def _call(name: str, *args: Any) -> None:
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{name}{args[:2]} failed: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data or None)]
    _call("mount", enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3])


# --------------------------------------------------------------------------- configuration


def parse_size(text: str) -> int:
    """``"4g"``, ``"512m"``, ``"1073741824"`` → bytes; ``"0"``, ``"off"`` or ``""`` → 0."""
    text = text.strip().lower()
    if text in ("", "0", "off", "none"):
        return 0
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    scale = units.get(text[-1], 1)
    number = text[:-1] if text[-1] in units else text
    try:
        return int(float(number) * scale)
    except ValueError:
        raise SandboxError(f"not a size: {text!r} (examples: 4g, 512m)") from None


def _per_slot(name: str, slot_index: int | None) -> str | None:
    """A setting that may name one value for every slot or a list by slot index."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    items = [item.strip() for item in raw.split(",")]
    index = slot_index if slot_index is not None and slot_index < len(items) else 0
    return items[index]


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_limit(slot_index: int | None = None, device: str = "cpu") -> int:
    """Address space allowed to one learner (bytes, 0: none). ``EDT_LEARNER_MEMORY``: one size
    for every slot, or one per slot index (``8g,8g,16g``). Default on a CPU slot: the host's
    memory less a reserve for the platform's own processes (an eighth, at least 1 GiB),
    divided among the host's slots (``EDT_HOST_SLOTS``, which the worker host sets), so
    that every slot's learner together fit in the machine; none on a GPU slot (CUDA
    reserves far more address space than it uses)."""
    configured = _per_slot("EDT_LEARNER_MEMORY", slot_index)
    if configured is not None:
        return parse_size(configured)
    if device != "cpu":
        return 0
    physical = _physical_memory()
    slots = int(os.environ.get("EDT_HOST_SLOTS") or 1)
    return (physical - max(1 << 30, physical // 8)) // max(1, slots)


@dataclass(frozen=True)
class Limits:
    memory: int = 0  # bytes of address space; 0: none
    # per user: every learner of the host, of every job, shares it, each thread counting (a
    # learner has 7-8 threads on CPU, more with data loader workers): 512 left a host room
    # for a few dozen learners, fewer beside one job's runaway forks
    processes: int = 4096
    file_size: int = 64 << 30
    cpu_seconds: int = 0  # 0: none
    open_files: int = 4096

    @classmethod
    def configured(cls, memory: int, cpu_seconds: int = 0) -> Limits:
        return cls(
            memory=memory,
            processes=int(os.environ.get("EDT_LEARNER_PROCESSES") or cls.processes),
            file_size=parse_size(os.environ.get("EDT_LEARNER_FILE_SIZE") or "64g"),
            cpu_seconds=cpu_seconds,
        )


@dataclass(frozen=True)
class Policy:
    """What user code may reach. Paths are absolute; ``hide`` is the data directory."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    uid: int | None = None  # None: keep the current user
    gid: int | None = None
    namespaces: bool = False
    tmp_size: int = 1 << 30

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Policy:
        raw = json.loads(text)
        raw["limits"] = Limits(**raw["limits"])
        for key in ("read", "write", "hide"):
            raw[key] = tuple(raw[key])
        return cls(**raw)


def data_dir() -> Path:
    """The platform's data directory (settings when Django is configured, else the env)."""
    try:
        from django.conf import settings

        if settings.configured:
            return Path(settings.EDT_DATA_DIR)
    except ImportError:
        pass
    return Path(os.environ.get("EDT_DATA_DIR") or Path(__file__).resolve().parents[1] / "var")


def data_roots() -> list[Path]:
    """The data roots there are (``EDT_DATA_ROOTS``, workers/dataroots.py): hidden like the
    data directory, so that a learner sees only its own dataset there, bound read-only."""
    from workers import dataroots

    text = os.environ.get("EDT_DATA_ROOTS", "")
    try:
        from django.conf import settings

        if settings.configured:
            text = str(getattr(settings, "EDT_DATA_ROOTS", text))
    except ImportError:
        pass
    return [r.path for r in dataroots.parse(text) if r.path.is_dir()]


def policy(
    read: list[Path],
    write: list[Path],
    memory: int,
    cpu_seconds: int = 0,
) -> Policy:
    """The policy for user code that reads ``read``, writes ``write`` and nothing else."""
    account = learner_account()
    root = os.geteuid() == 0
    return Policy(
        read=tuple(_resolved([*read, *_runtime()])),
        write=tuple(_resolved(write)),
        hide=tuple(_resolved([data_dir(), *data_roots(), *_platform_home()])),
        limits=Limits.configured(memory, cpu_seconds),
        uid=account[0] if account else None,
        gid=account[1] if account else None,
        namespaces=root,
        tmp_size=parse_size(os.environ.get("EDT_LEARNER_TMP_SIZE") or "1g"),
    )


def _resolved(paths: list[Path]) -> list[str]:
    return list(dict.fromkeys(str(Path(p).resolve()) for p in paths))


def _runtime() -> list[Path]:
    """What any Python code here needs to read: the interpreter, its libraries, EDT's code."""
    return [Path(sys.base_prefix), Path(sys.prefix), Path(__file__).resolve().parents[1]]


def _platform_home() -> list[Path]:
    """The platform user's home (``/root``): hidden too, with its keys and caches."""
    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    return [home] if home != Path("/") and home.is_dir() else []


_account: list[tuple[int, int] | None] = []  # looked up once per process


def learner_account() -> tuple[int, int] | None:
    """(uid, gid) user code runs as; None to stay as we are (EDT is not root, or the
    development opt-out ``EDT_LEARNER_USER=root``, which is logged)."""
    if not _account:
        _account.append(_resolve_account())
    return _account[0]


def account(name: str) -> tuple[int, int]:
    """(uid, gid) of the system user ``name``, created if there is none (needs root)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        with _accounts_lock():
            try:  # another slot worker may have made it while this one waited
                entry = pwd.getpwnam(name)
            except KeyError:
                entry = _create_account(name)
    return entry.pw_uid, entry.pw_gid


@contextlib.contextmanager
def _accounts_lock() -> Iterator[None]:
    """One account made at a time on this host. Two ``useradd`` at once (two slot workers
    starting their first learners together) were seen to lose one's entry: both reported
    the user made, with different uids, and the job's files belonged to the one that was
    gone (its learner then could not write its checkpoints)."""
    folder = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    fd = os.open(folder / "edt-accounts.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _resolve_account() -> tuple[int, int] | None:
    name = os.environ.get("EDT_LEARNER_USER", "").strip()
    if name == OPT_OUT_USER:
        log.warning("EDT_LEARNER_USER=root: user code runs as root (development only)")
        return None
    if os.geteuid() != 0:
        if name:
            log.warning("EDT_LEARNER_USER=%s needs EDT to run as root; ignored", name)
        return None
    name = name or DEFAULT_USER
    if name != DEFAULT_USER:  # only the default user is created
        try:
            pwd.getpwnam(name)
        except KeyError:
            raise SandboxError(f"EDT_LEARNER_USER={name}: no such user") from None
    uid, gid = account(name)
    if uid == 0:
        raise SandboxError(f"EDT_LEARNER_USER={name} is root; use 'root' to opt out explicitly")
    return uid, gid


def _create_account(name: str) -> pwd.struct_passwd:
    """A system user with its own group, no home, no shell, no password."""
    cmd = ["useradd", "--system", "--user-group", "--no-create-home"]
    cmd += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        entry = pwd.getpwnam(name)  # another slot may have created it meanwhile
    except KeyError:
        raise SandboxError(f"could not create the user {name}: {done.stderr.strip()}") from None
    log.info("created the system user %s (uid %d) to run user code", name, entry.pw_uid)
    return entry


# --------------------------------------------------------------------------- in the child


def enter(p: Policy) -> None:
    """Confine this process (and all it will start) to ``p``. Call once, in the child that
    is about to import user code, single-threaded, before anything of the user's runs."""
    if p.namespaces:
        _private_mounts(p)
    if p.uid is not None and p.gid is not None:
        for path in p.write:
            with contextlib.suppress(FileNotFoundError):
                os.chown(path, p.uid, p.gid)
    _set_limits(p.limits)
    if p.uid is not None and p.gid is not None:
        os.setgroups([])
        os.setgid(p.gid)
        os.setuid(p.uid)
    _call("prctl", PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0)
    os.umask(0o077)


def _private_mounts(p: Policy) -> None:
    """Hidden directories become empty tmpfs; the paths the code may use are bind-mounted
    back, parents before children (a bind may lie inside a hidden directory, and a hidden
    directory inside a bind)."""
    _call("unshare", CLONE_NEWNS)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    binds = {path: True for path in p.read} | {path: False for path in p.write}
    fds = {path: os.open(path, os.O_PATH) for path in binds if os.path.exists(path)}
    tmps = [t for t in PRIVATE_TMP if os.path.isdir(t)]
    steps = sorted([*p.hide, *tmps, *fds], key=lambda path: (path.rstrip("/").count("/"), path))
    try:
        for path in steps:
            if path in fds:
                _bind(fds[path], path, binds[path])
            elif path in p.hide:
                os.makedirs(path, exist_ok=True)
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
            else:
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={p.tmp_size}")
        for hidden in p.hide:
            _mount(None, hidden, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    finally:
        for fd in fds.values():
            os.close(fd)


def _bind(fd: int, path: str, read_only: bool) -> None:
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path):
            open(path, "a").close()
    _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _set_limits(limits: Limits) -> None:
    def cap(kind: int, value: int) -> None:
        _soft, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cap(resource.RLIMIT_NOFILE, limits.open_files)
    cap(resource.RLIMIT_NPROC, limits.processes)
    cap(resource.RLIMIT_FSIZE, limits.file_size)
    if limits.memory:
        cap(resource.RLIMIT_AS, limits.memory)
    if limits.cpu_seconds:
        cap(resource.RLIMIT_CPU, limits.cpu_seconds)


def out_of_memory(exc: BaseException) -> str | None:
    """The user's message when ``exc`` means their code ran out of its memory, else None."""
    text = str(exc)
    if not (isinstance(exc, MemoryError) or "can't allocate memory" in text):
        return None
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    where = (
        f"it tried to use more than its limit of {limit / (1 << 30):.1f} GiB "
        "(EDT_LEARNER_MEMORY on the worker host)"
        if limit != resource.RLIM_INFINITY
        else "the host has no memory left for it"
    )
    return f"{OUT_OF_MEMORY}: {where}"


def out_of_processes(exc: BaseException) -> str | None:
    """The user's message when ``exc`` means a thread or process could not be started,
    which under the learners' ``RLIMIT_NPROC`` is most likely that limit (or memory for
    another thread's stack), else None."""
    thread = isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)
    fork = isinstance(exc, BlockingIOError) and exc.errno == errno.EAGAIN and _forking(exc)
    if not (thread or fork):
        return None
    limit = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if limit == resource.RLIM_INFINITY:
        return f"{OUT_OF_PROCESSES}: the host could not start another"
    return (
        f"{OUT_OF_PROCESSES}: the processes and threads of user code on this host (every "
        f"job's learners together) are probably at their limit of {limit} "
        "(EDT_LEARNER_PROCESSES on the worker host), or it had no memory left for another"
    )


def _forking(exc: BaseException) -> bool:
    """Whether ``exc`` came from starting a process (not, say, a non-blocking lock)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_code.co_name if tb is not None else ""
    return "fork" in name or name in ("_execute_child", "_launch", "spawnv_passfds")


def user_limit(exc: BaseException) -> str | None:
    """The user's message when ``exc`` is user code reaching one of its limits."""
    return out_of_memory(exc) or out_of_processes(exc)


# --------------------------------------------------------------------------- job files


def open_beneath(root: Path, relative: str, append: bool = False) -> int:
    """A file descriptor for ``root/relative``, following no symbolic link below ``root``.

    User code owns its job directory: a platform process (root) that reads its logs or
    models, or appends to its log, must never be led by a link to a file of its own
    choosing (``/etc/shadow``, ``/etc/passwd``). Only regular files are opened."""
    *dirs, name = Path(relative).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in dirs:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        flags |= os.O_WRONLY | os.O_CREAT | os.O_APPEND if append else os.O_RDONLY
        opened = os.open(name, flags, 0o644, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(opened).st_mode):
        os.close(opened)
        raise OSError(errno.EINVAL, f"{relative} is not a regular file")
    os.set_blocking(opened, True)
    return opened


# --------------------------------------------------------------------------- the tree


def become_subreaper() -> None:
    """Orphans of this process's descendants come back to it instead of to init."""
    _call("prctl", PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0)


def dies_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the kernel sends the child ``sig`` when the
    thread that started it dies, ``kill -9`` included, so that nothing it runs outlives it
    (a model check whose Celery process was killed). A parent already gone by the time the
    child asks gets the signal at once. ``parent``: the parent's pid where the child arms it
    itself (a process forked from a fork server: ``os.getppid()`` on its first line)."""
    parent = os.getpid() if parent is None else parent

    def arm() -> None:
        _call("prctl", PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return arm


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command's name: its state, its parent,
    ... (OSError: no such process)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def running(pid: int) -> bool:
    """``pid`` is a process that has not ended (a zombie has), child of this one or not."""
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except OSError:
        return False


def _table() -> dict[int, list[int]]:
    """Parent pid → its children still alive, or still exiting: a zombie whose other threads
    have not exited yet (a killed process with threads, as one that imported torch) keeps its
    own children until its last thread goes, and only then hands them on."""
    below: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(entry)
            if fields[0] != "Z" or len(os.listdir(f"/proc/{entry}/task")) > 1:
                below.setdefault(int(fields[1]), []).append(int(entry))
        except OSError:
            continue
    return below


def children(pid: int) -> list[int]:
    """Children of ``pid`` alive or still exiting (see :func:`_table`)."""
    return _table().get(pid, [])


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` alive or still exiting, whatever session it moved to."""
    below = _table()
    found, todo = [], [pid]
    while todo:
        for child in below.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_children(subreaper: int, keep: Callable[[int], bool] = lambda _pid: False) -> int:
    """SIGKILL every descendant of ``subreaper`` (a subreaper: each one killed hands its own
    children to it) until none is left; returns how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = [pid for pid in children(subreaper) if not keep(pid)]
        if not pids:
            return len(killed)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if subreaper == os.getpid():
            reap()
        time.sleep(0.005)
    raise SandboxError(f"descendants of {subreaper} survived 30 s of SIGKILL")


def reap() -> None:
    """Collect every child of this process that ended (a subreaper's orphans too)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


# --------------------------------------------------------------------------- a command


ENV_POLICY = "EDT_SANDBOX_POLICY"


def command(p: Policy, argv: list[str], env: dict[str, str]) -> list[str]:
    """The command line that runs ``argv`` in the sandbox ``p``; the policy goes into ``env``
    (which the sandbox removes before ``argv`` starts)."""
    env[ENV_POLICY] = p.dumps()
    return [sys.executable, "-S", "-m", "workers.sandbox", "--", *argv]  # -S: no site, faster


def run(p: Policy, argv: list[str]) -> int:
    """``python -m workers.sandbox -- CMD...``: run CMD confined, as a child of this process,
    which stays outside, then kill whatever it left. SIGTERM ends the whole tree at once."""
    become_subreaper()
    pid = os.fork()
    if pid == 0:
        try:
            enter(p)
            os.execvp(argv[0], argv)
        except BaseException as exc:
            sys.stderr.write(f"the sandbox could not start the command: {exc}\n")
        os._exit(126)

    def end(signum: int, _frame: Any) -> None:
        kill_children(os.getpid())
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    status = _wait(pid)
    kill_children(os.getpid())
    return status


def _wait(pid: int) -> int:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1
        return os.waitstatus_to_exitcode(status)


def exit_code(code: int) -> int:
    """A status as a shell reports it: 128 + N for a process killed by signal N."""
    return 128 - code if code < 0 else code


def stop(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """End a :func:`run` process and everything under it. When it does not end in
    ``timeout`` s (a host too busy to run its handler), the whole tree is killed from here,
    children that left for a session of their own included: the sandbox, their subreaper,
    would otherwise die first and hand them to init."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        for _ in range(100):
            tree = [proc.pid, *descendants(proc.pid)]
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)  # none may start another meanwhile
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not descendants(proc.pid):
                break
        proc.wait()


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        sys.stderr.write("usage: EDT_SANDBOX_POLICY=JSON python -m workers.sandbox -- CMD...\n")
        return 2
    p = Policy.loads(os.environ.pop(ENV_POLICY))
    return exit_code(run(p, argv[1:]))


if __name__ == "__main__":
    with contextlib.suppress(OSError):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
