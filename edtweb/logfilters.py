"""Logging filters for noise that is not an error."""

from __future__ import annotations

import logging

from django.core.exceptions import RequestAborted


class OrphanedDisconnectFilter(logging.Filter):
    """Drop asyncio's "Task exception was never retrieved" for Django's disconnect listener.

    When Daphne stops (Ctrl-C) or gives up on a request whose client left, it cancels the
    application instance while Django's ASGI handler is still awaiting its two tasks. The
    handler's ``listen_for_disconnect`` task then ends with ``RequestAborted`` that nobody
    collects, and asyncio logs it with a traceback at garbage collection. The client is gone
    and nothing failed, so the record is dropped; every other asyncio record passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, RequestAborted)
