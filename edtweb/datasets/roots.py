"""Who may register a dataset where (docs/architecture.md, "Datasets in place"): the data
roots of ``EDT_DATA_ROOTS`` (workers/dataroots.py judges the path itself), and each root's
rule: any user, or only the members of the teams it names; staff may register anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from workers.dataroots import DataRoot, PathRefused, parse, resolve


def roots() -> list[DataRoot]:
    return parse(str(settings.EDT_DATA_ROOTS))


def may_register(user: Any, root: DataRoot) -> bool:
    if not root.teams or user.is_staff:
        return True
    return bool(user.memberships.filter(team__name__in=root.teams).exists())


def judged(user: Any, given: str) -> Path:
    """The real path ``given`` names under a data root that ``user`` may register under.
    :class:`PathRefused` (a 400) for the path itself, :class:`PermissionError` (a 403)
    where the root's rule leaves this user out."""
    root, path = resolve(given, roots())
    if not may_register(user, root):
        raise PermissionError(
            f"datasets under {root.path} may be registered by members of "
            f"{', '.join(root.teams)} only; ask an admin"
        )
    return path


__all__ = ["PathRefused", "judged", "may_register", "resolve", "roots"]
