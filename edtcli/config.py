"""Where `edt login` keeps the server's URL and the token: the user's config directory,
``$XDG_CONFIG_HOME/edt/credentials.json`` (else ``~/.config/edt/``), readable by the user
alone. ``EDT_URL`` and ``EDT_TOKEN`` override it (for CI jobs)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".config") / "edt"


def credentials_path() -> Path:
    return config_dir() / "credentials.json"


def load() -> dict[str, Any]:
    saved: dict[str, Any] = {}
    path = credentials_path()
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
        except ValueError:
            saved = {}
    for key, variable in (("url", "EDT_URL"), ("token", "EDT_TOKEN")):
        if os.environ.get(variable, "").strip():
            saved[key] = os.environ[variable].strip()
    return saved


def save(url: str, username: str, token: str) -> Path:
    """Write the credentials with mode 0600 (created so: never readable by others)."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "username": username, "token": token}, f, indent=2)
    os.chmod(path, 0o600)
    return path


def forget() -> bool:
    path = credentials_path()
    if path.exists():
        path.unlink()
        return True
    return False
