"""Data roots: folders on shared storage where datasets live in place (docs/architecture.md,
"Datasets in place").

An admin names them in ``EDT_DATA_ROOTS``: entries separated by commas, each a folder, or
``FOLDER=TEAM|TEAM`` to let only those teams' members (and staff) register datasets under
it. A path given by a user is judged here, before anything reads it: no ``..`` component,
under a root, and still under that root once every link in it is followed. Pure: no
Django, no torch; the web judges registrations with it, the sandbox hides the roots.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


class PathRefused(ValueError):
    """A path a dataset may not be registered at; the message says why."""


@dataclass(frozen=True)
class DataRoot:
    path: Path  # absolute, as the admin wrote it
    teams: tuple[str, ...] = ()  # empty: any user may register under it

    def real(self) -> Path:
        return Path(os.path.realpath(self.path))


def parse(text: str) -> list[DataRoot]:
    """``EDT_DATA_ROOTS``'s value as roots; a root that is not absolute is refused."""
    roots = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        folder, _, teams = entry.partition("=")
        path = Path(folder.strip())
        if not path.is_absolute():
            raise ValueError(f"EDT_DATA_ROOTS: {folder.strip()!r} is not an absolute path")
        names = tuple(t.strip() for t in teams.split("|") if t.strip())
        roots.append(DataRoot(path, names))
    return roots


def configured() -> list[DataRoot]:
    """The roots of this process's environment (a learner's host, or the web's settings)."""
    return parse(os.environ.get("EDT_DATA_ROOTS", ""))


def resolve(given: str, roots: list[DataRoot]) -> tuple[DataRoot, Path]:
    """The root ``given`` lies under and the real path it names. An absolute path must lie
    under a root; a relative one (WMLA's ``data_path``) is looked for under each root in
    turn. Refused (:class:`PathRefused`): an empty path, a ``..`` component, a path under no
    root, one that is not there, one whose links lead out of its root."""
    text = given.strip()
    if not text:
        raise PathRefused("give the dataset's path under a data root")
    if "\x00" in text:
        raise PathRefused("the path holds a NUL character")
    if ".." in PurePosixPath(text).parts:
        raise PathRefused(f"{text}: a path with '..' is refused; give it without")
    if not roots:
        raise PathRefused("no data roots are configured (EDT_DATA_ROOTS): upload the dataset")
    candidates = _candidates(text, roots)
    if not candidates:
        raise PathRefused(f"{text} is under no data root; the roots are {_names(roots)}")
    for root, path in candidates:
        if os.path.lexists(path):
            return root, _inside(root, path)
    raise PathRefused(f"{text}: no such file or folder under {_names([r for r, _ in candidates])}")


def _candidates(text: str, roots: list[DataRoot]) -> list[tuple[DataRoot, Path]]:
    path = Path(os.path.normpath(text))
    if not path.is_absolute():
        return [(root, root.path / path) for root in roots]
    return [(root, path) for root in roots if path == root.path or root.path in path.parents]


def _inside(root: DataRoot, path: Path) -> Path:
    """``path`` with its links followed, refused when that leaves ``root``."""
    real, base = Path(os.path.realpath(path)), root.real()
    if real != base and base not in real.parents:
        raise PathRefused(f"{path} leads out of the data root {root.path} through a link")
    if not (real.is_dir() or real.is_file()):
        raise PathRefused(f"{path} is neither a folder nor a file")
    return real


def _names(roots: list[DataRoot]) -> str:
    return ", ".join(str(r.path) for r in roots)
