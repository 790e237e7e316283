"""Loaded with ``-p`` before Django's settings: the test run gets its own data directory.

Nothing a test run writes (secret key, SQLite files, Redis files) lands in ``var/``.
"""

from __future__ import annotations

import os
import tempfile

os.environ["EDT_DATA_DIR"] = tempfile.mkdtemp(prefix="edt-test-data-")
# Tests start their own Redis; a stray REDIS_URL from the shell must not leak into them.
os.environ.pop("REDIS_URL", None)
# Parallel runners (pytest-xdist) each listen on ports of their own: a port one runner
# picked and has not bound yet is never another's.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and _worker[2:].isdigit():
    _low = 20000 + 1000 * (int(_worker[2:]) % 12)
    os.environ["EDT_PORT_RANGE"] = f"{_low}-{_low + 999}"
