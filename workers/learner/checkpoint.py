"""Checkpoints: model, optimizer and counters, written atomically, read with weights_only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

KEEP = 3


def save(directory: Path, step: int, state: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:09d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    for old in sorted(directory.glob("step-*.pt"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def latest(directory: Path) -> Path | None:
    found = sorted(directory.glob("step-*.pt")) if directory.is_dir() else []
    return found[-1] if found else None


def load(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, weights_only=True, map_location="cpu")
    return state
