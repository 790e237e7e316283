"""The rooms' layering (docs/architecture.md, "Layering"): ``protocol/``, ``scheduler/``,
``workers/`` and ``edtcli/`` never import the web (``edtweb``), Django or Celery, except
in the named adapters that are a process's entry into them; and one decision's path (the
live step through placement, the job controller, dispatch and the store) never goes back
up into ``edtweb/``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
ROOMS = ("protocol", "scheduler", "workers", "edtcli")
UPWARD = ("edtweb", "django", "celery", "channels", "rest_framework")

# Each adapter, with what it may import and why.
ADAPTERS = {
    # Celery's tasks and worker signals: a slot worker is a Celery worker (README, "What
    # runs") configured by Django's settings; the learner task's paths come in its message.
    "workers/tasks.py": {"celery", "django"},
    "workers/slot.py": {"celery", "django"},
    # The data directory, from Django's settings where a process has them configured.
    "workers/sandbox.py": {"django"},
}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, at any depth (function-level too). A
    ``from pkg import name`` gives ``pkg`` and ``pkg.name``: the name may be a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.module and not node.level, f"{path}:{node.lineno}: a relative import"
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def modules(room: str) -> list[Path]:
    return sorted((PROJECT / room).rglob("*.py"))


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_below_the_web_never_imports_it(room: str) -> None:
    wrong = []
    for path in modules(room):
        name = path.relative_to(PROJECT).as_posix()
        allowed = ADAPTERS.get(name, set())
        for line, module in imports(path):
            top = module.split(".")[0]
            if top in UPWARD and top not in allowed:
                wrong.append(f"{name}:{line} imports {module}")
    assert wrong == []


def test_learners_and_the_protocol_never_import_the_scheduler() -> None:
    """A learner process loads the protocol and its own code alone."""
    wrong = []
    for path in [*modules("protocol"), *modules("workers")]:
        name = path.relative_to(PROJECT).as_posix()
        if name == "workers/learner/drive.py":
            continue  # the local drive is a coordinator: it runs scheduler/elastic.py
        wrong += [f"{name}:{n} imports {m}" for n, m in imports(path) if m.startswith("scheduler")]
    assert wrong == []


def test_the_adapters_named_exist() -> None:
    assert all((PROJECT / name).is_file() for name in ADAPTERS)


def test_one_decisions_path_stays_below_the_web() -> None:
    """From the live step, follow every import of the project's own: none reaches edtweb."""
    start = "scheduler.live.loop"
    seen, todo, reached, read = set(), [start], [], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = PROJECT / (module.replace(".", "/") + ".py")
        if not path.is_file():
            path = PROJECT / module.replace(".", "/") / "__init__.py"
        if not path.is_file():
            continue  # a library's, or a name that is no module
        read.add(module)
        for _, imported in imports(path):
            if imported.split(".")[0] in UPWARD:
                reached.append(f"{module} imports {imported}")
            elif imported.split(".")[0] in ROOMS:
                todo.append(imported)
    assert {"scheduler.placement", "scheduler.live.job", "scheduler.elastic",
            "scheduler.dispatch", "scheduler.store", "protocol.jobstore",
            "scheduler.policies.fairshare", "scheduler.policies.goodput"} <= read  # fmt: skip
    assert reached == []


def test_the_web_and_its_services_start_without_torch() -> None:
    """Only learners, model checks and the learner fork servers (the slots', the drive's)
    need torch (2 s and more to import on a quiet machine): the web's URLs, the management
    commands' modules and
    the Celery workers' tasks (slot and control workers) load without it, so that none of
    those processes pays that cost at its start (docs/architecture.md, "Layering")."""
    code = (
        "import importlib, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
        "'edtweb.settings'); import django; django.setup(); import edtweb.urls, edtweb.asgi; "
        "[importlib.import_module(f'edtweb.core.management.commands.{c}') for c in "
        "('edt_run', 'edt_scheduler', 'edt_metrics', 'edt_sweeps', 'edt_worker', 'edt_check')]; "
        "from edtweb.celery import app; app.loader.import_default_modules(); "
        "import workers.tasks, workers.slot, workers.control; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:5])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", f"torch imported: {done.stdout}"
