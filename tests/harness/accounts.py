"""EDT run as an unprivileged user, as an admin runs it: a system account of its own, a
directory it owns (data, static files, home), and the project and its interpreter readable
by it. The tests run as root here; ``Account.prefix`` runs a command as that user."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.harness.processes import PROJECT_DIR
from workers import sandbox


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    home: Path  # owned by the account: EDT's data directory and static files go here
    prefix: tuple[str, ...]  # runs a command as the account
    note: str  # how the interpreter is reached, for failure messages


def searchable(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid`` (group ``gid``) may enter directory ``path`` (mode bits only)."""
    st = path.stat()
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def closed_directories(path: Path, uid: int, gid: int) -> list[Path]:
    """The directories on the way to ``path`` that ``uid`` may not enter."""
    return [parent for parent in reversed(path.parents) if not searchable(parent, uid, gid)]


def needed_paths() -> list[Path]:
    """What EDT's processes open: the interpreter (its real install, the virtualenv's
    packages) and the project."""
    paths = [sys.executable, sys.prefix, sys.base_prefix, PROJECT_DIR]
    return [Path(os.path.realpath(p)) for p in paths]


def as_user(uid: int, gid: int, closed: dict[Path, set[str]]) -> tuple[str, ...]:
    """A command prefix that runs its command as ``uid``. Where a directory on the way to
    the interpreter is closed to it (root's home, where the interpreter was installed),
    the command runs in a mount namespace of its own in which that directory is replaced
    by an open one showing only the entries EDT needs from it, as an install under /opt
    would be; nothing else of it is visible, and the machine's own mounts are untouched."""
    setpriv = ("setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--")
    if not closed:
        return setpriv
    lines, moves, n = ["set -e"], [], 0
    for directory, entries in closed.items():
        for entry in sorted(entries):
            source = shlex.quote(str(directory / entry))
            lines.append(f"s{n}=$(mktemp -d); mount --bind {source} $s{n}")
            moves.append(f"mkdir {source}; mount --move $s{n} {source}; rmdir $s{n}")
            n += 1
        lines.append(f"mount -t tmpfs -o mode=755 edt-view {shlex.quote(str(directory))}")
    script = "\n".join([*lines, *moves, 'exec "$@"'])
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *setpriv)


def describe(closed: dict[Path, set[str]]) -> str:
    if not closed:
        return "the interpreter and the project are readable by every user"
    shown = "; ".join(f"{d} (mode {stat.S_IMODE(d.stat().st_mode):o}) shows only "
                      f"{', '.join(sorted(e))}" for d, e in closed.items())  # fmt: skip
    return f"EDT's processes run in a mount namespace where {shown}"


@contextmanager
def unprivileged_account(name: str) -> Iterator[Account]:
    """A system user ``name`` (created like the learners' users, workers/sandbox.py) with a
    directory of its own, removed at the end. Fails, saying why, where the interpreter or
    the project cannot be made readable by it."""
    home = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    try:
        if os.geteuid() != 0:  # the tests run unprivileged already
            yield Account(name, os.geteuid(), home, (), "the tests' own user")
            return
        uid, gid = sandbox.account(name)
        os.chown(home, uid, gid)
        closed: dict[Path, set[str]] = {}
        for path in needed_paths():
            directories = closed_directories(path, uid, gid)
            if not directories:
                continue
            if len(directories) > 1 or directories[0] == Path("/"):
                raise AssertionError(
                    f"{path} cannot be made readable by user {name}: the directories "
                    f"{', '.join(map(str, directories))} are closed to other users; make "
                    "the project and its virtualenv readable by others (chmod o+rx)"
                )  # fmt: skip
            closed.setdefault(directories[0], set()).add(path.relative_to(directories[0]).parts[0])
        yield Account(name, uid, home, as_user(uid, gid, closed), describe(closed))
    finally:
        shutil.rmtree(home, ignore_errors=True)
