"""README, CONTRIBUTING and docs/ (its design pages included) stay true to the code: every `records-destination`
command they name exists (its `--help` runs), every command the CLI has is in README's command list, every relative
link and every `.py` path they name exists, and every class-like name they quote in backticks is defined somewhere
in the code."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "records-destination"
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]  # design pages too
CODE_FOLDERS = ("destination", "spark_jobs", "tests", "bench", "scripts", "testbed")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _named_commands() -> set[str]:
    found: set[str] = set()
    for doc in DOCS:
        found.update(re.findall(r"records-destination ([a-z][a-z-]*)\b", _text(doc)))
    return found - {"serve-"}  # nothing else follows the program's name in prose


def _cli_commands() -> set[str]:
    """The subcommands the program itself lists (its --help), an oracle apart from the docs."""
    shown = subprocess.run([str(BIN), "--help"], capture_output=True, text=True, check=True).stdout
    choices = re.search(r"\{([a-z,-]+)\}", shown)
    assert choices, shown
    return set(choices.group(1).split(","))


def test_the_docs_name_commands_at_all() -> None:
    assert {"serve", "tester", "tables"} <= _named_commands()


@pytest.mark.parametrize("command", sorted(_named_commands()))
def test_every_command_the_docs_name_runs_with_help(command: str) -> None:
    done = subprocess.run([str(BIN), command, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"`records-destination {command} --help` failed: {done.stderr[-500:]}"
    assert "usage: records-destination " + command in done.stdout


def test_readme_lists_every_command_of_the_program() -> None:
    """Each command has a usage line (`.venv/bin/records-destination COMMAND …` at the start of a line)."""
    listed = set(re.findall(r"^\S*records-destination ([a-z][a-z-]*)", _text(ROOT / "README.md"), re.MULTILINE))
    missing = _cli_commands() - listed
    assert not missing, f"README has no usage line for: {sorted(missing)}"


def _links(doc: Path) -> list[str]:
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", _text(doc))
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")]


def test_every_relative_link_exists() -> None:
    checked = 0
    for doc in DOCS:
        for target in _links(doc):
            path = (doc.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{doc.relative_to(ROOT)} links to {target}, which does not exist"
            checked += 1
    assert checked > 0


def test_every_python_path_the_docs_name_exists() -> None:
    """A quoted `write/runner.py` or `csvrows.py` is the end of some file's path in the project."""
    files = [p.relative_to(ROOT).as_posix() for folder in CODE_FOLDERS for p in (ROOT / folder).rglob("*.py")]
    files += [p.name for p in ROOT.glob("*.py")]
    checked = 0
    for doc in DOCS:
        for quoted in re.findall(r"`([A-Za-z0-9_./-]+\.py)\b", _text(doc)):
            assert any(f == quoted or f.endswith("/" + quoted) for f in files), \
                f"{doc.relative_to(ROOT)} names `{quoted}`, which does not exist"
            checked += 1
    assert checked > 0


def _code_text() -> str:
    parts = [_text(p) for folder in CODE_FOLDERS for p in (ROOT / folder).rglob("*.py") if p != Path(__file__)]
    parts += [_text(p) for p in (ROOT / "protos").glob("*.proto")]
    return "\n".join(parts)


def test_every_class_like_name_the_docs_quote_is_in_the_code() -> None:
    """`MergeUnit` in the architecture map must be a name the code has (environment variables, all capitals, aside)."""
    code = _code_text()
    names = {name for doc in DOCS for name in re.findall(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)`", _text(doc))}
    assert names
    missing = sorted(name for name in names if not re.search(rf"\b{name}\b", code))
    assert not missing, f"the docs quote names the code does not have: {missing}"
