"""``REDIS_URL`` as Celery reads it: one URL in redis-py's form for every part of EDT, written
the way Celery's broker (kombu) and result backend want it.

redis-py, the Channels layer and the learners read any URL redis-py reads
(``protocol/connection.py``). Celery differs in two places: a socket is
``redis+socket:///path?virtual_host=N`` there (``unix://`` is not one of its transports),
and a ``rediss://`` URL must say ``ssl_cert_reqs``; its TLS files are given as
``broker_use_ssl`` / ``redis_backend_use_ssl`` instead, checked against the CA by default.
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from protocol.connection import TLS_FILES

CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


def celery_options(url: str) -> dict[str, Any]:
    """Celery settings (without the ``CELERY_`` prefix) for the Redis at ``url``:
    ``BROKER_URL`` and ``RESULT_BACKEND``, plus ``BROKER_USE_SSL`` and
    ``REDIS_BACKEND_USE_SSL`` for a ``rediss://`` URL."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme == "unix":
        db = query.pop("db", "0")
        path = parts.path
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        query["virtual_host"] = db
        socket_url = urlunsplit(("redis+socket", netloc, path, urlencode(query), ""))
        return {"BROKER_URL": socket_url, "RESULT_BACKEND": socket_url}
    if parts.scheme == "rediss":
        files = {key: query.pop(key) for key in TLS_FILES if key in query}
        reqs = query.pop("ssl_cert_reqs", "required").lower().removeprefix("cert_")
        if reqs not in CERT_REQS:
            raise ValueError(f"REDIS_URL: ssl_cert_reqs={reqs!r}; one of {sorted(CERT_REQS)}")
        options = {"ssl_cert_reqs": CERT_REQS[reqs], **files}
        plain = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))
        return {"BROKER_URL": plain, "RESULT_BACKEND": plain, "BROKER_USE_SSL": options,
                "REDIS_BACKEND_USE_SSL": options}  # fmt: skip
    return {"BROKER_URL": url, "RESULT_BACKEND": url}
