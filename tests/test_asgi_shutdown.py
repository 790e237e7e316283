"""A request in flight when Daphne stops must not print a traceback into the user's terminal.

Daphne cancels every application instance on Ctrl-C. Django's ASGI handler then leaves its
disconnect listener behind, which ends with RequestAborted that nobody collects; asyncio
would log it as "Task exception was never retrieved" with a traceback. This drives the real
handler through exactly that sequence.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from edtweb.asgi import django_asgi_app


async def cancel_mid_request() -> None:
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await incoming.put({"type": "http.request", "body": b"", "more_body": False})
    responding = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        responding.set()
        await asyncio.Event().wait()  # a client that never takes the response

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/no-such-page/",
        "raw_path": b"/no-such-page/",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    instance = asyncio.create_task(django_asgi_app(scope, incoming.get, send))
    await asyncio.wait_for(responding.wait(), 30)
    instance.cancel()  # what Daphne does to pending instances when it stops
    with pytest.raises(asyncio.CancelledError):
        await instance
    await incoming.put({"type": "http.disconnect"})  # the listener now raises, unobserved
    for _ in range(5):
        await asyncio.sleep(0)
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()  # the stuck response task
    del instance
    gc.collect()  # the orphaned listener is collected here, and asyncio reports it


def test_cancelled_request_leaves_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        asyncio.run(cancel_mid_request())
        gc.collect()
    assert not [r for r in caplog.records if r.exc_info], caplog.text


def test_other_asyncio_errors_still_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    async def orphan_failure() -> None:
        async def fail() -> None:
            raise RuntimeError("a real bug")

        task = asyncio.create_task(fail())
        await asyncio.sleep(0.01)
        del task
        gc.collect()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(orphan_failure())
        gc.collect()
    assert "Task exception was never retrieved" in caplog.text
    assert "a real bug" in caplog.text
