"""The public tester input files, beside the checkout in `../shared/tester-inputs` (README). A test over them never
passes by having nothing to run: a pattern that matches no file stays in the list as its own path, and a test given
such a path fails naming it (`missing_input`, called by tests/conftest.py before the test's fixtures), rather than
being collected with no case and reported as skipped."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
INPUTS_FOLDER = SHARED / "tester-inputs"


def input_files(*patterns: str) -> list[Path]:
    """The files under INPUTS_FOLDER each pattern (a glob, or a file's relative path) matches, sorted, in the
    patterns' order; a pattern that matches none gives its own path, which `missing_input` fails a test for."""
    found: list[Path] = []
    for pattern in patterns:
        found += sorted(INPUTS_FOLDER.glob(pattern)) or [INPUTS_FOLDER / pattern]
    return found


def missing_input(values: Iterable[object]) -> str | None:
    """Why a test given `values` (its parameters, or a list it loops over) cannot run: a tester input among them
    that is not a file."""
    for value in values:
        if isinstance(value, Path) and value.is_relative_to(INPUTS_FOLDER) and not value.is_file():
            return (f"tester input {value} is missing: the tests read the public tester inputs from "
                    f"{INPUTS_FOLDER} (../shared/tester-inputs beside the checkout, as README says); "
                    "without them this test has nothing to run")
    return None


def present(paths: list[Path]) -> list[Path]:
    """`paths`, for a test that loops over them; the test fails naming the first that is missing."""
    problem = missing_input(paths)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    return paths
