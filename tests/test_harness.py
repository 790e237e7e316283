"""The live harness lives in tests/harness/, not inside a test: no test module, nor the
harness, imports a test module or conftest.py (a fixture is found through conftest.py, a
helper is imported from tests.harness)."""

from __future__ import annotations

import ast

import pytest

from tests.harness.processes import PROJECT_DIR

TESTS = PROJECT_DIR / "tests"


def imported_modules(source: str, package: str) -> set[str]:
    """The absolute names of the modules (and module attributes) ``source`` imports, at any
    depth of its code; relative imports are resolved against ``package``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def is_test_module(name: str) -> bool:
    """``tests.test_x`` or ``tests.conftest``, or a name inside one."""
    parts = name.split(".")
    return (
        len(parts) >= 2
        and parts[0] == "tests"
        and (parts[1].startswith("test_") or parts[1] == "conftest")
    )


def importers_of_test_modules() -> dict[str, list[str]]:
    """Each module under tests/ (not the models user code runs, nor vendored files) that
    imports a test module, with what it imports."""
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        inside = path.relative_to(TESTS).parts
        if inside[0] in ("models", "vendor"):
            continue
        package = ".".join(path.parent.relative_to(PROJECT_DIR).parts)
        bad = sorted(n for n in imported_modules(path.read_text(), package) if is_test_module(n))
        if bad:
            found[str(path.relative_to(PROJECT_DIR))] = bad
    return found


def test_no_module_imports_a_test_module() -> None:
    found = importers_of_test_modules()
    assert found == {}, f"import these from tests.harness instead: {found}"


@pytest.mark.parametrize(
    ("line", "package"),
    [
        ("from tests.test_cli import LiveEdt", "tests"),
        ("from tests.conftest import wait_for", "tests"),
        ("import tests.test_faults", "tests"),
        ("from tests import test_faults", "tests"),
        ("from .test_cli import live_edt", "tests"),
        ("from ..conftest import alice", "tests.harness"),
        ("def later() -> None:\n    from tests.test_scheduler_live import Cluster", "tests"),
    ],
)
def test_the_check_sees_every_form_of_such_an_import(line: str, package: str) -> None:
    assert any(is_test_module(n) for n in imported_modules(line, package)), line


@pytest.mark.parametrize(
    "line",
    ["from tests.harness.stack import LiveEdt", "import tests.browser", "from . import harness"],
)
def test_the_check_lets_the_harness_be_imported(line: str) -> None:
    assert not any(is_test_module(n) for n in imported_modules(line, "tests")), line
