"""scripts/test prepares what its selection needs: the quick tier (`-m unit`) installs no system package and runs no
linter; every other run (CI's `scripts/test -q`) installs and lints everything. Run on a copy of scripts/test whose
scripts/bootstrap, scripts/lint and .venv/bin/python only record how they were called."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDER = '#!/usr/bin/env bash\necho "$(basename "$0") $*" >> "$(dirname "$0")/{up}calls"\n'


def calls_of_scripts_test(tmp_path: Path, *arguments: str, script: str = "test") -> list[str]:
    (tmp_path / "scripts").mkdir()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / script, tmp_path / "scripts" / script)
    for recorder, up in ((tmp_path / "scripts" / "bootstrap", "../"), (tmp_path / "scripts" / "lint", "../"),
                         (tmp_path / ".venv" / "bin" / "python", "../../")):
        recorder.write_text(RECORDER.format(up=up))
        recorder.chmod(0o755)
    subprocess.run([str(tmp_path / "scripts" / script), *arguments], check=True, timeout=60)
    return [line.rstrip() for line in (tmp_path / "calls").read_text().splitlines()]


@pytest.mark.parametrize("selection", [["-m", "unit"], ["-q", "-m", "unit"], ["-munit"], ["-m=unit", "-x"]])
def test_the_quick_tier_installs_no_system_package_and_runs_no_linter(tmp_path: Path, selection: list[str]) -> None:
    assert calls_of_scripts_test(tmp_path, *selection) == ["bootstrap --test-python",
                                                           f"python -m pytest {' '.join(selection)}"]


@pytest.mark.parametrize("arguments", [["-q"], [], ["tests/test_naming.py", "-k", "unit"], ["-m", "not unit"]])
def test_every_other_run_installs_and_lints_everything(tmp_path: Path, arguments: list[str]) -> None:
    assert calls_of_scripts_test(tmp_path, *arguments) == ["bootstrap --test", "lint",
                                                           " ".join(["python -m pytest", *arguments])]


def test_bootstrap_for_the_quick_tier_installs_the_test_extras_and_calls_no_apt(tmp_path: Path) -> None:
    """scripts/bootstrap --test-python on a .venv of the package alone: pip adds the test and dev extras; no apt-get,
    no sudo (each a recorder first on PATH)."""
    for name in ("pyproject.toml", "setup.py", "scripts/bootstrap"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "protos", tmp_path / "protos")
    bin_dir, fake_path = tmp_path / ".venv" / "bin", tmp_path / "path"
    bin_dir.mkdir(parents=True)
    fake_path.mkdir()
    for recorder, up in ((bin_dir / "python", "../../"), (fake_path / "apt-get", "../"), (fake_path / "sudo", "../")):
        recorder.write_text(RECORDER.format(up=up))
        recorder.chmod(0o755)
    sources = b"".join((tmp_path / name).read_bytes() for name in ("pyproject.toml", "setup.py"))
    sources += b"".join(proto.read_bytes() for proto in sorted((tmp_path / "protos").glob("*.proto")))
    (tmp_path / ".venv" / ".records-destination-installed").write_text(
        f"{hashlib.sha256(sources).hexdigest()} extras=\n")
    (tmp_path / "destination" / "protocol").mkdir(parents=True)
    for proto in (tmp_path / "protos").glob("*.proto"):
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            (tmp_path / "destination" / "protocol" / f"{proto.stem}{suffix}").touch()
    environment = {**os.environ, "PATH": f"{fake_path}:{os.environ['PATH']}"}
    subprocess.run([str(tmp_path / "scripts" / "bootstrap"), "--test-python"], check=True, timeout=60, env=environment)
    assert (tmp_path / "calls").read_text().splitlines() == ["python -m pip install --quiet --upgrade pip wheel",
                                                             "python -m pip install --quiet -e .[test,dev]"]


def test_the_quick_tier_selects_no_test_that_needs_postgresql() -> None:
    collected = subprocess.run([sys.executable, "-m", "pytest", "-m", "unit", "--collect-only", "-q",
                                "tests/test_catalogs.py"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    ids = [line for line in collected.stdout.splitlines() if line.startswith("tests/")]
    assert any("sqlite" in test_id for test_id in ids), collected.stdout  # the sql catalog's SQLite half stays quick
    assert not any("postgresql" in test_id for test_id in ids), ids  # PostgreSQL is a system package (apt)


@pytest.mark.parametrize(("arguments", "runs"), [(["--rows", "1M"], "python -m bench.run --rows 1M"),
                                                 (["-m", "bench.layouts", "--rows", "10"], "python -m bench.layouts --rows 10")])
def test_scripts_bench_runs_any_module_of_bench_with_the_bench_extras(tmp_path: Path, arguments: list[str],
                                                                      runs: str) -> None:
    assert calls_of_scripts_test(tmp_path, *arguments, script="bench") == ["bootstrap", runs]


def test_every_bench_command_the_docs_give_installs_what_it_needs() -> None:
    """A bare `python -m bench.…` fails as written: it needs .venv and, for psutil and matplotlib, the bench extra,
    which `scripts/bench -m bench.…` installs first."""
    generated = "Generated by `scripts/bench` (`python -m bench.run`)"  # bench/report.py's line: names, runs nothing
    bare = [f"{page.relative_to(ROOT)}: {line.strip()}" for page in [ROOT / "README.md", ROOT / "CONTRIBUTING.md",
                                                                      *sorted((ROOT / "docs").rglob("*.md"))]
            for line in page.read_text().splitlines()
            if re.search(r"(?<!-m )(?<!bin/)python -m bench\.", line.replace(generated, ""))]
    assert bare == []
