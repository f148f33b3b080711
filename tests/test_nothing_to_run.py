"""A test over the tester inputs never passes by having nothing to run: with its inputs missing (no
`../shared/tester-inputs`) it fails naming them, and any parametrized test with no case fails its collection,
where pytest's default reports it as skipped. Run as pytest runs the suite: a pytest process with the project's
configuration and tests/conftest.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.tester_inputs import INPUTS_FOLDER, input_files

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_given.py").write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path / "test_given.py")],
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_test_over_missing_tester_inputs_fails_naming_them(tmp_path: Path) -> None:
    pattern = "clickhouse/no_such_input_*.json"
    assert input_files(pattern) == [INPUTS_FOLDER / pattern]  # kept as a case, not dropped
    done = run_pytest(tmp_path, "import pytest\nfrom tests.tester_inputs import input_files, present\n"
                                f"@pytest.mark.parametrize('path', input_files({pattern!r}))\n"
                                "def test_each(path):\n    pass\n"
                                f"def test_all():\n    present(input_files({pattern!r}))\n")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "1 failed, 1 error" in out and "skipped" not in out, out
    assert out.count(f"tester input {INPUTS_FOLDER / pattern} is missing") == 2, out
    assert "../shared/tester-inputs beside the checkout" in out, out


def test_a_parametrized_test_with_no_case_fails_its_collection(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, "import pytest\n@pytest.mark.parametrize('path', [])\ndef test_each(path):\n    pass\n")
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "Empty parameter set in 'test_each'" in out and "skipped" not in out, out
