"""Which input files a tester run sends, each with its schema and its configuration.

A single file writes into `--schema-name`. A folder (subfolders included, files in path order) gives each file an
empty schema of its own, `<schema-name>_<run id>_<the file's path>` (the run id is the run's start time to the millisecond, so a
second run against the same root never meets the first run's tables), and each file takes the nearest
`configuration.json` from its own folder up to the input folder. Other `*configuration.json` files (ClickHouse's
`default_configuration.json`) are configuration files, never inputs: skipped with a note."""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from destination.tester.validation import input_problems

CONFIGURATION = "configuration.json"


class TesterInputError(Exception):
    """An input or configuration file the tester cannot use (the message says which and why)."""


@dataclass(frozen=True)
class InputFile:
    path: Path
    name: str  # as printed: the path under the input folder
    schema: str
    configuration: Path | None  # the configuration file it runs with (None: an empty configuration)
    data: dict[str, Any]


@dataclass
class InputPlan:
    files: list[InputFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why"
    problems: list[str] = field(default_factory=list)  # "name: path: mistake", one per mistake
    configurations: dict[Path | None, dict[str, str]] = field(default_factory=dict)


def schema_slug(relative: Path) -> str:
    """A file's path under the input folder as a schema-name part: `sub/input-1.json` → `sub_input_1`."""
    return re.sub(r"[^a-z0-9]+", "_", relative.with_suffix("").as_posix().lower()).strip("_") or "input"


def _is_hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def read_configuration(path: Path) -> dict[str, str]:
    """A configuration file: a JSON object whose values are strings (fivetran-protocol §1.1)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TesterInputError(f"the configuration file {str(path)!r} is not a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise TesterInputError(f"the configuration file {str(path)!r} is not a JSON object: it holds a "
                               f"{type(value).__name__}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise TesterInputError(f"the configuration file {str(path)!r}: {key!r} is {json.dumps(item)}; every "
                                   f"value is a JSON string (write {json.dumps(json.dumps(item))})")
    return value


def _configuration_of(path: Path, top: Path) -> Path | None:
    """The nearest configuration.json from the file's folder up to `top`, the input folder."""
    folder = path.parent
    while True:
        candidate = folder / CONFIGURATION
        if candidate.is_file():
            return candidate
        if folder == top or folder == folder.parent:
            return None
        folder = folder.parent


def _read_input(path: Path, name: str, plan: InputPlan) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        plan.problems.append(f"{name}: cannot read the input file: {exc}")
        return None
    problems = input_problems(data)
    plan.problems.extend(f"{name}: {problem}" for problem in problems)
    return None if problems else dict(data)


def plan_inputs(source: Path, schema: str, run_id: str, configuration_file: str | None = None) -> InputPlan:
    """The run's files, read and checked (their mistakes in `problems`), with their schemas and configurations;
    `--configuration` (configuration_file), when given, is every file's."""
    if not source.exists():
        raise TesterInputError(f"the input {str(source)!r} does not exist")
    explicit = Path(configuration_file) if configuration_file else None
    if explicit is not None and not explicit.is_file():
        raise TesterInputError(f"the configuration file {configuration_file!r} does not exist")
    plan = InputPlan()
    if source.is_dir():
        found = sorted((p.relative_to(source), p) for p in source.rglob("*.json") if p.is_file())
        entries = []
        for relative, path in found:
            if _is_hidden(relative) or relative.name == CONFIGURATION:
                continue
            if relative.name.endswith(CONFIGURATION):
                plan.skipped.append(f"{relative.as_posix()}: a configuration file, not an input (only one named "
                                    f"{CONFIGURATION} configures the inputs beside it and below)")
                continue
            entries.append((path, relative.as_posix(), f"{schema}_{run_id}_{schema_slug(relative)}",
                            explicit or _configuration_of(path, source)))
        names = [e[2] for e in entries]
        entries = [(p, n, s if names.count(s) == 1 else f"{s}_{i + 1}", c) for i, (p, n, s, c) in enumerate(entries)]
    else:
        entries = [(source, source.name, schema, explicit or _configuration_of(source, source.parent))]
    for path, name, file_schema, configuration in entries:
        if configuration not in plan.configurations:
            plan.configurations[configuration] = read_configuration(configuration) if configuration else {}
        data = _read_input(path, name, plan)
        if data is not None:
            plan.files.append(InputFile(path, name, file_schema, configuration, data))
    return plan


def configuration_warnings(source: str, configuration: dict[str, str], fields: list[str]) -> list[str]:
    """One warning per configuration key that is not a field of the destination's form (a typo such as `chnages`
    would otherwise leave the field at its default while the run succeeds)."""
    warnings = []
    for key in configuration:
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            warnings.append(f"{source}: configuration field {key!r} is not a field of the destination's form and is "
                            f"ignored{hint}; the form's fields are {', '.join(fields)}")
    return warnings
