"""README's five-minute walkthrough, run as written: its ```bash blocks are read from the README (so the test cannot
drift from the text), the first (`scripts/serve`) in the background, the others in order, in a copy of the repository
beside a `shared` folder, as a new user's checkout sits beside `../shared`. Each must exit 0 and show what the text
says: the tester's PASS, the table listed, DuckDB's row count (the oracle: the rows the input file upserts, read
from the file itself) and the status page naming the table."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serverproc import SERVING, ServerProcess, check_marked, wait_for
from tests.tester_inputs import SHARED

pytestmark = pytest.mark.serve

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Five-minute walkthrough"
GRPC_PORT = 50052  # scripts/serve's default, which the walkthrough relies on
LEFT_OUT = {".git", ".venv", ".venv-iceberg-spark", "data", "build", "dist", ".pytest_cache", "spark-warehouse",
            "metastore_db"}  # top-level names a clean checkout does not have


def walkthrough() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert HEADING in text, f"README.md has no section {HEADING!r}"
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def blocks(section: str) -> list[str]:
    """The ```bash blocks in order, each without the indentation of the list item it sits in."""
    found = re.findall(r"^( *)```bash\n(.*?)^\1```", section, re.MULTILINE | re.DOTALL)
    return ["\n".join(line[len(indent):] for line in body.splitlines()) for indent, body in found]


def upserted_rows(input_file: Path, table: str) -> int:
    """Rows the input file leaves in `table`: it only upserts rows without a primary key (each its `_fivetran_id`)."""
    data = json.loads(input_file.read_text())
    assert data["create_table"][table]["primary_key"] == [], "the oracle below counts keyless upserts only"
    ids: set[str] = set()
    for op in data["ops"]:
        assert set(op) == {"upsert"}, f"the oracle handles upserts only, not {sorted(op)}"
        ids.update(row["_fivetran_id"] for row in op["upsert"].get(table, []))
    return len(ids)


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the working tree (with its generated gRPC stubs) and its installed `.venv`, beside `shared`."""
    installed = subprocess.run(["bash", "-c", "cat pyproject.toml setup.py protos/*.proto | sha256sum | cut -d' ' -f1"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    stamp = ROOT / ".venv" / ".records-destination-installed"  # scripts/bootstrap's record of what it installed
    if not stamp.exists() or stamp.read_text().split(" ", 1)[0] != installed:
        pytest.fail("run scripts/bootstrap first: the copy shares .venv, and its scripts/serve must not reinstall it")
    copy = tmp_path / "records-destination"
    copy.mkdir()
    for item in ROOT.iterdir():
        if item.name in LEFT_OUT:
            continue
        if item.is_dir():
            shutil.copytree(item, copy / item.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(item, copy / item.name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "shared").symlink_to(SHARED.resolve())
    return copy


@pytest.fixture
def served(checkout: Path, tmp_path: Path) -> Iterator[tuple[Path, ServerProcess]]:
    check_marked()
    commands = blocks(walkthrough())
    metrics = re.search(r"--metrics-port (\d+)", commands[0])
    assert metrics, commands[0]
    for port in (GRPC_PORT, int(metrics.group(1))):
        assert _port_free(port), f"port {port} is in use: the walkthrough's server needs it"
    log = tmp_path / "serve.log"
    process = subprocess.Popen(["bash", "-e", "-c", commands[0]], cwd=checkout, stdout=open(log, "wb"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    server = ServerProcess(process, f"127.0.0.1:{GRPC_PORT}", log)
    try:
        wait_for(lambda: server.health() == SERVING, "the walkthrough's server SERVING", server)
        wait_for(lambda: "health: SERVING" in log.read_text(), "the log line the walkthrough waits for", server)
        yield checkout, server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)


def _run(command: str, cwd: Path) -> str:
    done = subprocess.run(["bash", "-e", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_readme_walkthrough_runs_as_written(served: tuple[Path, ServerProcess]) -> None:
    checkout, server = served
    section = walkthrough()
    tester, tables, query = blocks(section)[1:]

    input_arg = re.search(r"--input (\S+)", tester)
    assert input_arg, tester
    input_file = checkout / input_arg.group(1)
    table = input_file.stem.removeprefix("input_")
    assert input_file.is_file(), f"the walkthrough's input {input_arg.group(1)} is not beside the checkout"

    shown = _run(tester, checkout)
    assert re.search(rf"^PASS\b.*{input_file.name}", shown, re.MULTILINE), shown
    assert not re.search(r"^FAIL\b", shown, re.MULTILINE), shown

    expected = upserted_rows(input_file, table)
    listed = _run(tables, checkout)
    row = re.search(rf"^tester\s+{table}\s+(\d+)\s+(\d+)\s+(\d+)\s*$", listed, re.MULTILINE)
    assert row and row.group(2) == str(expected), listed
    version, rows, files = row.groups()
    said = re.sub(r"\s+", " ", section)  # the text says what the command shows
    assert f"schema `tester`, table `{table}`, at version {version}" in said
    assert f"{rows} rows in {files} file" in said

    counted = re.findall(r"│\s*(\d+)\s*│", _run(query, checkout))
    assert counted == [str(expected)], f"DuckDB's count {counted}, the input file upserts {expected} rows"
    assert f"the {expected} rows" in re.sub(r"\s+", " ", section)  # the text says the count the query shows

    url = re.search(r"<(http://localhost:\d+/)>", section)
    assert url, "the walkthrough names no status page URL"
    with urllib.request.urlopen(url.group(1), timeout=30) as response:
        assert response.status == 200
        page = response.read().decode()
    assert table in page and "WriteBatch" in page, page[:2000]
    assert server.process.poll() is None, server.log.read_text()[-3000:]
