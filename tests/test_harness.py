"""The live harness lives in tests/harness/, not inside a test: no test module, nor the
harness, imports a test module or conftest.py (a fixture is found through conftest.py, a
helper is imported from tests.harness). Its checks can fail: the fault watch sees a job
RUNNING without a learner, and fails when it stopped looking; a wait ends by the test's own
deadline, with its message."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from edtweb.training.models import Job
from tests.harness import scheduling, waiting
from tests.harness.cluster import Watch
from tests.harness.processes import PROJECT_DIR
from tests.harness.waiting import wait_for

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


def running_job(owner: Any) -> Job:
    return Job.objects.create(owner=owner, name="watched", model_path="m.py", data_path="d",
                              state=Job.State.RUNNING)  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_watch_measures_how_long_a_running_job_had_no_learner(alice: Any) -> None:
    job = running_job(alice)
    learners: list[object] = []
    watch = Watch(job, lambda: learners)
    wait_for(lambda: watch.longest >= 1.5, 30, "the watch to see a job with no learner")
    learners.append(object())  # a learner again: the stretch ends
    time.sleep(1.5)
    first = watch.stop()
    assert first >= 1.5
    assert first < 1.5 + 2.0 * waiting.load_factor() + 1  # not counted on while learners ran


@pytest.mark.django_db(transaction=True)
def test_a_watch_whose_sampling_raised_fails_at_its_stop(alice: Any) -> None:
    job = running_job(alice)

    def broken() -> list[object]:
        raise RuntimeError("the learners could not be listed")

    watch = Watch(job, broken)
    wait_for(lambda: not watch.is_alive(), 30, "the watch to end")
    with pytest.raises(AssertionError, match=r"the watch on job .* failed") as failed:
        watch.stop()
    assert isinstance(failed.value.__cause__, RuntimeError)


def test_a_wait_ends_before_the_tests_own_deadline_saying_what_it_waited_for() -> None:
    """A wait longer than what is left of the test fails when its time is up, by its own
    message, before pytest-timeout would stop the test."""
    saved = waiting._test_deadline
    try:
        waiting._test_deadline = time.monotonic() + 25 * waiting.load_factor()
        started = time.monotonic()
        with pytest.raises(AssertionError, match=r"waiting for never.*own deadline came first"):
            wait_for(lambda: False, 3600, "never")
        assert time.monotonic() - started < 10 * waiting.load_factor()
    finally:
        waiting._test_deadline = saved


def test_a_module_whose_tests_each_start_a_stack_is_shared_test_by_test() -> None:
    """`make test` hands each fault test to a worker of its own, a module of shared tests
    whole."""
    fault = "tests/test_faults.py::test_a_killed_learner_is_replaced_and_the_job_completes"
    matrix = "tests/test_config_matrix.py::test_a_short_job_completes_in_each_configuration[x]"
    assert scheduling.work_unit(fault) == fault
    assert scheduling.work_unit(matrix) == matrix
    assert scheduling.work_unit("tests/test_sandbox.py::test_it[case]") == "tests/test_sandbox.py"


def test_the_longest_modules_go_out_first_and_the_others_keep_their_order() -> None:
    ids = ["test_api.py::a", "test_wmla.py::b", "test_api.py::c", "test_faults.py::d",
           "test_cli.py::e", "test_faults.py::f"]  # fmt: skip
    items = [SimpleNamespace(nodeid=f"tests/{i}") for i in ids]
    order = [ids[i][-1] for i in scheduling.longest_first(items)]
    assert order == ["d", "f", "b", "a", "c", "e"]


def module_scoped_fixtures(path: Path) -> list[str]:
    """The fixtures of module (or wider) scope defined in the test module at ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        for deco in getattr(node, "decorator_list", []):
            scopes = [k.value for k in getattr(deco, "keywords", []) if k.arg == "scope"]
            if any(isinstance(s, ast.Constant) and s.value != "function" for s in scopes):
                found.append(getattr(node, "name", "?"))
    return found


def test_the_modules_the_scheduling_names_exist_and_those_shared_by_test_share_nothing() -> None:
    """A module renamed would fall out of the schedule unseen; one shared test by test with
    a module-scoped fixture would start that fixture's stack on each worker."""
    for name in {*scheduling.EACH_TEST_ALONE, *scheduling.LONGEST}:
        assert (PROJECT_DIR / name).is_file(), name
    shared = {n: module_scoped_fixtures(PROJECT_DIR / n) for n in scheduling.EACH_TEST_ALONE}
    assert not any(shared.values()), shared
    assert module_scoped_fixtures(TESTS / "test_sandbox.py"), "the check finds one"
