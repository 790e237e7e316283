"""Loaded with ``-p`` before Django's settings: the test run gets its own data directory.

Nothing a test run writes (secret key, SQLite files, Redis files) lands in ``var/``.
"""

from __future__ import annotations

import os
import tempfile

os.environ["EDT_DATA_DIR"] = tempfile.mkdtemp(prefix="edt-test-data-")
# Tests start their own Redis; a stray REDIS_URL from the shell must not leak into them.
os.environ.pop("REDIS_URL", None)
