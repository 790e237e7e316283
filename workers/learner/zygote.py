"""The host's learner zygote: the fork servers' preload imported once per worker host.

Each slot's learners fork from a fork server of the slot's own (``host.py``): a process
that imported torch and the learner once, so that a learner starts in well under a second.
Started the stock way, each such server is a new interpreter importing all of that (2.3 s
of CPU on a quiet machine, per slot and per slot worker restart). The worker host
(``workers/launcher.py``) starts one zygote instead, beside its slots: it imports the
preload (``host.PRELOAD``) and listens on a Unix socket in a folder only the host's user
may enter (a slot asking before it listens waits for it). A slot's worker sends it the two
ends a fork server is started with (the listening socket its requests come on, and the
read end of the pipe that closes when the slot's worker dies); the zygote forks, and the
child becomes that slot's fork server (``multiprocessing.forkserver.main``) and a
subreaper, as a stock one is. It belongs to the slot as the stock one does: it forks the
slot's learners on the slot's requests, and it ends when the slot's worker dies (the
pipe's end); only its parent is the zygote. Its environment is cut to what a learner is
passed (``launcher.start_zygote``).

A slot whose zygote does not answer (gone, or not listening within the wait) starts its
fork server the stock way: slower, never wrong. Only CPU slots use it: a GPU slot's fork
server starts with its one GPU visible (``CUDA_VISIBLE_DEVICES``), and the zygote's would
be shared.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
import time
from pathlib import Path

ZYGOTE_ENV = "EDT_LEARNER_ZYGOTE"  # the zygote's socket, in a slot worker's environment
READY_SECONDS = 120.0  # how long a slot waits for its host's zygote to listen (starting)


def serve(path: Path) -> None:
    """Run the zygote: import the preload, then fork a fork server for each request on
    ``path`` until this process is stopped."""
    import importlib

    from workers import sandbox
    from workers.learner.host import PRELOAD

    for name in PRELOAD:
        importlib.import_module(name)
    sandbox.become_subreaper()  # a dead fork server's learners come back here, reaped
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a zygote before this one's
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen()
    listener.settimeout(1.0)
    while True:
        sandbox.reap()  # the fork servers that ended, and the orphans that came back here
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(30.0)
            try:
                _, fds, _, _ = socket.recv_fds(conn, 1, 2)
            except OSError:
                continue
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                _become_fork_server(listener, conn, fds[0], fds[1])
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!i", pid))


def _become_fork_server(listener: socket.socket, conn: socket.socket, listen_fd: int,
                        alive_r: int) -> None:  # fmt: skip
    """In the forked child: the slot's fork server, until the slot's worker dies."""
    from multiprocessing import forkserver

    from workers import sandbox

    code = 1
    try:
        listener.close()
        conn.close()
        sandbox.become_subreaper()  # not inherited across fork
        forkserver.main(listen_fd, alive_r, [])
        code = 0
    except SystemExit as exc:  # the slot's worker died: the pipe's end
        code = exc.code if isinstance(exc.code, int) else 0
    finally:
        os._exit(code)


def ask(path: str, listen_fd: int, alive_r: int, wait: float = READY_SECONDS) -> int:
    """A fork server for the caller from the zygote at ``path``, started with these two
    fds; its pid. A zygote still starting (no socket yet, or a dead one's) is waited for
    up to ``wait`` seconds. Raises OSError when it does not answer."""
    deadline = time.monotonic() + wait
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(30.0)
        while True:
            try:
                conn.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        socket.send_fds(conn, [b"F"], [listen_fd, alive_r])
        reply = b""
        while len(reply) < 4:
            part = conn.recv(4 - len(reply))
            if not part:
                raise ConnectionError("the learner zygote hung up")
            reply += part
    return int(struct.unpack("!i", reply)[0])


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
