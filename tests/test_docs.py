"""The README documents every setting and every command, and the code cites the project's
own architecture document, by sections that exist (tests keep them in step)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.harness.processes import PROJECT_DIR

README = (PROJECT_DIR / "README.md").read_text()
ARCHITECTURE = PROJECT_DIR / "docs" / "architecture.md"

# The one citation format: docs/architecture.md, "Section" (a heading of the document). The
# section's name may run onto the next line of a docstring or a comment.
CITATION = re.compile(r'docs/architecture\.md,\s*(?:#+\s*|//\s*)?"([^"]{1,80})"')
MENTION = re.compile(r"architecture\.md")
WRAP = re.compile(r"\s*\n\s*(?:#+|//|\*)?\s*")
# The design brief lives outside the repository: nothing here may cite it.
BRIEF = re.compile(r"DESIGN\.md")
CODE = {".py", ".html", ".js"}
TEXT = CODE | {".md", ".txt", ".toml", ".cfg", ".sh", ".css"}
# Directories of other people's files (tests' vendored scripts and data sets) or of output.
NOT_OURS = {".git", ".venv", "var", "node_modules", "__pycache__", ".pytest_cache",
            ".mypy_cache", ".ruff_cache", "staticfiles", "artifacts", "vendor", "data"}  # fmt: skip


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


def project_texts() -> Iterator[tuple[str, str]]:
    """(path relative to the project, text) of every text file of the project's own (what
    git tracks, or would: ignored files are not ours), this one excepted (it names what it
    looks for)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=PROJECT_DIR, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for relative in listed:
        path = PROJECT_DIR / relative
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        if NOT_OURS.intersection(path.relative_to(PROJECT_DIR).parts[:-1]):
            continue
        if path.suffix in TEXT or path.name in ("Makefile", "run"):
            yield relative, path.read_text(errors="replace")


def headings() -> set[str]:
    return set(re.findall(r"^#+ (.+?)\s*$", ARCHITECTURE.read_text(), re.MULTILINE))


def cited_sections(text: str) -> list[str]:
    return [WRAP.sub(" ", name) for name in CITATION.findall(text)]


def test_nothing_outside_docs_cites_the_design_brief() -> None:
    citing = {
        path for path, text in project_texts()
        if BRIEF.search(text) and not path.startswith("docs/")
    }  # fmt: skip
    assert sorted(citing) == [], "cite docs/architecture.md and its section instead"


def test_every_cited_section_is_a_heading_of_the_architecture() -> None:
    titles = headings()
    cited = {(path, name) for path, text in project_texts() for name in cited_sections(text)}
    assert len(cited) >= 10, "the code cites docs/architecture.md by section"
    missing = sorted(f"{path}: {name!r}" for path, name in cited if name not in titles)
    assert missing == [], f"no such heading in docs/architecture.md: {missing}"


def test_code_cites_the_architecture_by_section() -> None:
    bare = sorted(
        path for path, text in project_texts()
        if Path(path).suffix in CODE and len(MENTION.findall(text)) != len(CITATION.findall(text))
    )  # fmt: skip
    assert bare == [], f'cite as docs/architecture.md, "Section": {bare}'


def test_the_architecture_draws_the_path_of_one_decision() -> None:
    text = ARCHITECTURE.read_text()
    assert {"Rooms", "Layering", "Processes", "Sources of truth", "Scheduling contract",
            "Elastic training protocol", "One decision's path"} <= headings()  # fmt: skip
    drawing = text[text.index("## One decision's path") :]
    path = ["scheduler/live/loop.py", "scheduler/live/snapshot.py", "scheduler/policies",
            "scheduler/placement.py", "scheduler/live/job.py", "scheduler/elastic.py",
            "scheduler/dispatch.py", "scheduler/store.py"]  # fmt: skip
    places = [drawing.index(module) for module in path]
    assert places == sorted(places), "the drawing follows the decision, step by step"


def test_the_readme_links_the_architecture() -> None:
    assert "[docs/architecture.md](docs/architecture.md)" in README
