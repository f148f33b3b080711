"""A commit on a local disk survives a crash of the machine with everything it names: the kernel's own record of
a real server's system calls (strace) shows each file of the version, and the folders naming them, flushed to the
disk before the commit record is linked into place, the record's bytes before it, and its folder after."""
from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from destination.protocol import sdk
from destination.shared.on_disk import layout
from destination.shared.storage.base import StorageSpec
from destination.shared.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from testbed.processes import children
from tests.batchfiles import write_csv
from tests.rpc_helpers import table
from tests.serverproc import SERVING, start_server, wait_for

pytestmark = pytest.mark.serve  # starts a `serve` process

T = table("orders", [("id", "LONG", True), ("s", "STRING"), ("_fivetran_synced", "UTC_DATETIME"),
                     ("_fivetran_deleted", "BOOLEAN")])
KEY = bytes(range(32))
# one system call a line: `pid name(args) = result`, or split around other processes' calls as
# `pid name(args <unfinished ...>` and later `pid <... name resumed>) = result`
_CALL = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\((.*?))(?: <unfinished \.\.\.>$|\)?\s*= (-?\d+))")


@dataclass(frozen=True)
class Call:
    name: str
    args: str
    result: int
    done_at: int  # the line where the call returned: the order of the trace


def _calls(trace: Path) -> list[Call]:
    started: dict[tuple[str, str], str] = {}
    calls = []
    for number, line in enumerate(trace.read_text().splitlines()):
        match = _CALL.match(line)
        if match is None:
            continue
        pid, resumed, name, args, result = match.groups()
        if resumed is not None:
            args = started.pop((pid, resumed), "")
            name = resumed
        elif result is None:
            started[(pid, name)] = args
            continue
        if result is not None:
            calls.append(Call(name, args, int(result), number))
    return calls


def _fsynced(calls: list[Call], path: Path) -> list[int]:
    """Where an fsync of `path` (named by strace's -y as `fd</path>`) returned successfully."""
    return [c.done_at for c in calls if c.name in ("fsync", "fdatasync") and c.args.endswith(f"<{path}>")
            and c.result == 0]


def _flushed_before(calls: list[Call], path: Path, moment: int) -> bool:
    """Whether `path`'s bytes were on the disk before `moment`: fsynced under its name, or under a temporary name
    that was then renamed to it."""
    if any(at < moment for at in _fsynced(calls, path)):
        return True
    for call in calls:
        if call.name.startswith("rename") and call.result == 0 and call.done_at < moment:
            names = re.findall(r'"([^"]+)"', call.args)
            if len(names) == 2 and Path(names[1]) == path and \
                    any(at < call.done_at for at in _fsynced(calls, Path(names[0]))):
                return True
    return False


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server under strace (strace exits when the server and its children have)."""
    for pid in children(process.pid):
        os.kill(pid, signal.SIGTERM)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


def test_a_commit_record_is_linked_after_what_it_names_is_on_the_disk(tmp_path: Path) -> None:
    root = (tmp_path / "root").resolve()
    trace = tmp_path / "trace.txt"
    wrapper = ("strace", "-f", "--seccomp-bpf", "-qq", "-y", "-e", "signal=none",
               "-e", "trace=fsync,fdatasync,link,linkat,rename,renameat,renameat2", "-o", str(trace))
    server = start_server(str(root), tmp_path / "server.log", wrapper=wrapper)
    configuration = {"changes": "parquet"}  # change files too: a folder of their own, named by the record
    try:
        wait_for(lambda: server.health() == SERVING, "SERVING", server)
        stub = server.stub()
        assert stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="s", table=T)).success
        rows = [{"id": str(i), "s": f"value {i}", "_fivetran_synced": "2024-01-01T00:00:00Z",
                 "_fivetran_deleted": "false"} for i in range(50)]
        batch = write_csv(tmp_path / "upsert.csv.zstd.aes", [c.name for c in T.columns], rows, KEY)
        answer = stub.WriteBatch(sdk.WriteBatchRequest(
            configuration=configuration, schema_name="s", table=T, replace_files=[str(batch)], keys={str(batch): KEY},
            file_params=sdk.FileParams(compression=1, encryption=1, null_string=NULL_STRING,
                                       unmodified_string=UNMODIFIED_STRING)), timeout=600)
        assert answer.WhichOneof("response") == "success", answer
    finally:
        _stop(server.process)
    version = TableStore(open_storage(StorageSpec(root=str(root)))).load("s", "orders")
    assert version is not None and version.version == 2
    calls = _calls(trace)
    record = root / layout.log_path(version.prefix, 2)
    links = [c for c in calls if c.name in ("link", "linkat") and f'"{record}"' in c.args and c.result == 0]
    assert len(links) == 1, f"the commit record {record} was not linked into place once: {links}"
    linked = links[0].done_at
    temporary = Path(re.findall(r'"([^"]+)"', links[0].args)[0])
    assert any(at < linked for at in _fsynced(calls, temporary)), "the record's bytes were not flushed before the link"
    assert any(at > linked for at in _fsynced(calls, record.parent)), "the record's folder was not flushed after it"
    directory = root / layout.version_dir(version.prefix, 2)
    changes = root / layout.changes_dir(version.prefix, 2)
    named = [*(directory / f.name for f in version.files), *sorted(changes.iterdir()), directory / "_manifest",
             directory, changes, root / version.prefix]
    late = [str(path) for path in named if not _flushed_before(calls, path, linked)]
    assert not late, f"not flushed to the disk before the commit record: {late}"
