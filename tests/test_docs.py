"""The README documents every setting and every command (a test keeps them in step)."""

from __future__ import annotations

import re

from tests.harness.processes import PROJECT_DIR

README = (PROJECT_DIR / "README.md").read_text()


def settings_variables() -> set[str]:
    source = (PROJECT_DIR / "edtweb" / "settings.py").read_text()
    return set(re.findall(r'env(?:bool|int|str|list|path)\("([A-Z_]+)"', source))


def test_every_environment_variable_is_documented() -> None:
    variables = settings_variables()
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "EDT_DATA_DIR"} <= variables
    missing = sorted(v for v in variables if f"`{v}`" not in README)
    assert missing == [], f"document these in README.md, Configuration: {missing}"


def test_every_management_command_is_documented() -> None:
    commands = PROJECT_DIR / "edtweb" / "core" / "management" / "commands"
    names = sorted(p.stem for p in commands.glob("edt_*.py"))
    assert names, "no commands found"
    missing = [name for name in names if f"`{name}" not in README]
    assert missing == [], f"document these commands in README.md: {missing}"


def test_quick_start_names_make_run_and_make_test() -> None:
    assert "make run" in README and "make test" in README
