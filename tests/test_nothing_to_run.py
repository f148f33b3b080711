"""A test over the tester inputs never passes by having nothing to run: with its inputs missing (no
`../shared/tester-inputs`) it fails naming them, and any parametrized test with no case fails its collection,
where pytest's default reports it as skipped. Run as pytest runs the suite: a pytest process with the project's
configuration and tests/conftest.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tester_inputs import INPUTS_FOLDER, input_files

ROOT = Path(__file__).resolve().parent.parent


PATTERN = "clickhouse/no_such_input_*.json"
GIVEN = {  # test files of a suite, each run as pytest runs the suite's
    "test_missing_inputs.py": "import pytest\nfrom tests.tester_inputs import input_files, present\n"
                              f"@pytest.mark.parametrize('path', input_files({PATTERN!r}))\n"
                              "def test_each(path):\n    pass\n"
                              f"def test_all():\n    present(input_files({PATTERN!r}))\n",
    "test_no_case.py": "import pytest\n@pytest.mark.parametrize('path', [])\ndef test_each(path):\n    pass\n",
}


@pytest.fixture(scope="module")
def given_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One pytest process over every file of GIVEN (a process costs seconds): a file that fails its collection
    does not stop the others' (`--continue-on-collection-errors`)."""
    folder = tmp_path_factory.mktemp("given")
    for name, source in GIVEN.items():
        (folder / name).write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(folder),
                           "--continue-on-collection-errors", *(str(folder / name) for name in GIVEN)],
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120, check=False)


def summary_lines(done: subprocess.CompletedProcess[str], file: str) -> list[str]:
    """The `-ra` summary's words about one given file, one per test or file: FAILED, ERROR, SKIPPED (whose line
    is `SKIPPED [1] path:line: reason`) ..."""
    return [words[0] for words in (line.split(" ") for line in done.stdout.splitlines())
            if any(word.split("::")[0].split(":")[0].endswith(f"/{file}") for word in words[1:3])]


def test_a_test_over_missing_tester_inputs_fails_naming_them(given_run: subprocess.CompletedProcess[str]) -> None:
    assert input_files(PATTERN) == [INPUTS_FOLDER / PATTERN]  # kept as a case, not dropped
    out = given_run.stdout + given_run.stderr
    assert given_run.returncode == 1, out
    assert summary_lines(given_run, "test_missing_inputs.py") == ["ERROR", "FAILED"], out  # test_each[…], test_all
    assert out.count(f"tester input {INPUTS_FOLDER / PATTERN} is missing") == 2, out
    assert "../shared/tester-inputs beside the checkout" in out, out


def test_a_parametrized_test_with_no_case_fails_its_collection(given_run: subprocess.CompletedProcess[str]) -> None:
    out = given_run.stdout + given_run.stderr
    assert summary_lines(given_run, "test_no_case.py") == ["ERROR"], out  # its collection
    assert given_run.returncode != 0 and "Empty parameter set in 'test_each'" in out, out
    assert "skipped" not in out, out
