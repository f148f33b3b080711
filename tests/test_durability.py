"""A commit on a local disk survives a crash of the machine with everything it names: the kernel's own record of
a real server's system calls (strace) shows each file of the version, and the folders naming them, flushed to the
disk before the commit record is linked into place, the record's bytes before it, and its folder after; the same
for the Delta and Iceberg commits that follow, and delta-rs's checkpoint flushed."""
from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from destination.on_disk import layout
from destination.protocol import sdk
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
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
        if resumed is not None:  # a resumed call always ends with its result
            name, args = resumed, started.pop((pid, resumed), "")
        elif result is None:
            started[(pid, name)] = args
            continue
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
    return any(any(at < call.done_at for at in _fsynced(calls, Path(source)))
               for call, source, target in _moves(calls) if call.done_at < moment and Path(target) == path)


def _moves(calls: list[Call]) -> list[tuple[Call, str, str]]:
    """Successful renames and links: (the call, from, to)."""
    found = []
    for call in calls:
        if (call.name.startswith("rename") or call.name.startswith("link")) and call.result == 0:
            names = re.findall(r'"([^"]+)"', call.args)
            if len(names) == 2:
                found.append((call, names[0], names[1]))
    return found


def _late_for(calls: list[Call], record: Path, files: list[Path], folders: list[Path]) -> list[str]:
    """What the commit record `record` names but was not on the disk when it was linked into place: its own bytes
    (flushed before the link) and folder (after it), each of `files`, and each of `folders` (flushed after the last
    name renamed or linked into it and before the record)."""
    links = [(call, source) for call, source, target in _moves(calls)
             if target == str(record) and call.name.startswith("link")]
    assert len(links) == 1, f"{record} was not linked into place once: {links}"
    linked, temporary = links[0][0].done_at, Path(links[0][1])
    late = [] if _flushed_before(calls, temporary, linked) else [f"{record}'s bytes"]
    if not any(at > linked for at in _fsynced(calls, record.parent)):
        late.append(f"{record.parent} after {record.name}")
    late += [str(path) for path in files if not _flushed_before(calls, path, linked)]
    for folder in folders:
        last_name = max((c.done_at for c, _s, target in _moves(calls)
                         if Path(target).parent == folder and c.done_at < linked), default=-1)
        if not any(last_name < at < linked for at in _fsynced(calls, folder)):
            late.append(f"{folder} (folder)")
    return late


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server under strace (strace exits when the server and its children have)."""
    for pid in children(process.pid):
        os.kill(pid, signal.SIGTERM)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


def test_commit_records_are_linked_after_what_they_name_is_on_the_disk(tmp_path: Path) -> None:
    """The records commits of CreateTable and of a write with change files, and the write's Delta and Iceberg
    commits."""
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
    table = root / version.prefix

    def files_in(folder: Path) -> list[Path]:
        return sorted(path for path in folder.iterdir() if path.is_file())

    first, second = (root / layout.version_dir(version.prefix, n) for n in (1, 2))
    changes = root / layout.changes_dir(version.prefix, 2)
    late = _late_for(calls, root / layout.log_path(version.prefix, 1), files_in(first),  # CreateTable's version
                     [first, table, table.parent, root])
    late += _late_for(calls, root / layout.log_path(version.prefix, 2), [*files_in(second), *files_in(changes)],
                      [second, changes, changes.parent, table])
    change_data = table / "_change_data" / layout.version_dir_name(2)  # Delta's cdc actions name these
    assert files_in(change_data), "the write made no Delta change data files: the check below would be vacuous"
    late += _late_for(calls, table / "_delta_log" / f"{2:020d}.json", files_in(change_data),
                      [change_data, change_data.parent])
    metadata = table / "metadata"
    late += _late_for(calls, metadata / "v2.metadata.json",
                      [path for path in files_in(metadata) if path.suffix == ".avro"], [metadata])
    checkpoints = sorted((table / "_delta_log").glob("*.checkpoint.parquet"))  # delta-rs's, at Delta's first commit
    assert checkpoints, "no Delta checkpoint was written: the check below would be vacuous"
    late += [str(path) for path in checkpoints if not _fsynced(calls, path)]  # retention deletes the logs behind it
    assert not late, f"not on the disk when a commit record named it: {late}"
