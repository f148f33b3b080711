"""WritePath taking over an abandoned claim, on both backends: the takeover is exclusive, a commit never lacks a file,
and a table whose latest committed version is incomplete stays readable and can be repaired."""
from __future__ import annotations

import json
import socket
import subprocess
import threading
from typing import Any

import pytest

from destination.commands.validator import validate_version
from destination.on_disk import layout
from destination.on_disk.locations import file_dir
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.store.versions import IncompleteVersion, Repair
from destination.write.one_step import commit_one_step
from tests.conftest import spec_of
from tests.test_table_store import SCHEMA, appender, ids

TABLE_NAME = "events"


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def leave_stale_claim(storage: Storage, version: int, leftovers: int = 3) -> None:
    """What a writer that died leaves: its claim on `version` (its pid gone) and an unfinished directory."""
    prefix = layout.table_prefix(SCHEMA, TABLE_NAME)
    holder = {"writer": "dead-writer", "host": socket.gethostname(), "pid": dead_pid(), "at": 4102444800.0}
    storage.write_bytes(layout.claim_path(prefix, version), json.dumps(holder).encode())
    for i in range(leftovers):
        storage.write_bytes(f"{layout.version_dir(prefix, version)}/leftover-{i}.parquet", b"unfinished")


class HookedStorage:
    """A real store whose calls can be held at chosen points, so that two writers interleave the same way every
    run. Today's takeover has no hook of its own inside the claim step, so the points are storage calls."""

    def __init__(self, storage: Storage, before: Any = None, after: Any = None) -> None:
        self._storage = storage
        self._before = before or (lambda op, path, result: None)
        self._after = after or (lambda op, path, result: None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def _call(self, op: str, path: str, fn: Any) -> Any:
        self._before(op, path, None)
        result = fn()
        self._after(op, path, result)
        return result

    def read_bytes(self, path: str) -> bytes:
        return self._call("read", path, lambda: self._storage.read_bytes(path))

    def delete_prefix(self, prefix: str) -> None:
        self._call("delete_prefix", prefix, lambda: self._storage.delete_prefix(prefix))

    def create_exclusive(self, path: str, data: bytes) -> bool:
        return self._call("create", path, lambda: self._storage.create_exclusive(path, data))


class TakeoverRace:
    """Both writers read the stale claim before either acts on it. A second writer clearing the unfinished version
    does so only once the first has written its data files, and the first writes its commit record only after the
    second has decided (cleared, or lost the takeover). That is the interleaving that broke the table."""

    def __init__(self, prefix: str, version: int) -> None:
        self.claim = layout.claim_path(prefix, version)
        self.directory = layout.version_dir(prefix, version)
        self.read_together = threading.Barrier(2)
        self.readers: set[int] = set()
        self.clears = 0
        self.lock = threading.Lock()
        self.filled = threading.Event()
        self.other_decided = threading.Event()
        self.first_to_commit = threading.Lock()
        self.committing: set[int] = set()

    def before(self, op: str, path: str, result: Any) -> None:
        if op == "delete_prefix" and path == self.directory:
            with self.lock:
                self.clears += 1
                second = self.clears == 2
            if second:
                self.filled.wait()

    def after(self, op: str, path: str, result: Any) -> None:
        me = threading.get_ident()
        if op == "read" and path == self.claim and me not in self.readers:
            self.readers.add(me)
            self.read_together.wait()
        elif op == "delete_prefix" and path == self.directory and self.clears >= 2:
            self.other_decided.set()
        elif op == "create" and path.startswith(self.claim) and result is False and me in self.readers:
            self.other_decided.set()  # lost the takeover

    def fault(self, step: str) -> None:
        if step == "after_data_files":
            self.filled.set()
        elif step == "before_commit_record" and self.first_to_commit.acquire(blocking=False):
            self.other_decided.wait()


def test_two_writers_taking_over_one_stale_claim_never_commit_a_version_with_missing_files(storage: Storage) -> None:
    commit_one_step(TableStore(storage), SCHEMA, TABLE_NAME, appender(storage, 1))
    leave_stale_claim(storage, 2)
    prefix = layout.table_prefix(SCHEMA, TABLE_NAME)
    race = TakeoverRace(prefix, 2)
    errors: list[BaseException] = []

    def writer(first_id: int) -> None:
        store = TableStore(HookedStorage(storage, race.before, race.after), fault=race.fault)  # type: ignore[arg-type]
        try:
            commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, first_id))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in (100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader = TableStore(storage)
    for n in (2, 3):
        version = reader.load(SCHEMA, TABLE_NAME, n)
        assert version is not None and validate_version(storage, version.directory) == []
    latest = reader.load(SCHEMA, TABLE_NAME)
    assert latest is not None and latest.version == 3
    assert ids(reader, latest) == [1, 2, 3, 100, 101, 102, 200, 201, 202]
    assert [n for n in storage.list_children(f"{prefix}/_log") if ".claim" in n] == []
    assert errors == []


WRITERS = 6


def test_many_writers_over_a_stale_claim_keep_every_key_exactly_once(storage: Storage) -> None:
    """WritePath with their own identities (as separate servers) all start on a table whose next version is claimed
    by a dead writer; each appends twice. Every key must be in the latest version exactly once."""
    commit_one_step(TableStore(storage), SCHEMA, TABLE_NAME, appender(storage, 1))
    leave_stale_claim(storage, 2, leftovers=20)
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        store = TableStore(storage)
        start.wait()
        try:
            for i in range(2):
                commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, offset + i * 10, 2))
        except Exception as exc:
            errors.append(exc)

    offsets = [1000 * (w + 1) for w in range(WRITERS)]
    threads = [threading.Thread(target=writer, args=(o,)) for o in offsets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    reader = TableStore(storage)
    latest = reader.load(SCHEMA, TABLE_NAME)
    assert latest is not None and latest.version == 1 + 2 * WRITERS
    expected = sorted([1, 2, 3, *(o + i * 10 + k for o in offsets for i in range(2) for k in range(2))])
    assert ids(reader, latest) == expected  # each key once: no key lost, none doubled
    for n in range(2, latest.version + 1):  # no committed version lacks a file
        version = reader.load(SCHEMA, TABLE_NAME, n)
        assert version is not None and validate_version(storage, version.directory) == []
    prefix = layout.table_prefix(SCHEMA, TABLE_NAME)
    assert [n for n in storage.list_children(f"{prefix}/_log") if ".claim" in n] == []


def break_latest_version(store: TableStore) -> str:
    """What the race used to leave: the latest version committed, one of its data files gone. Returns its name."""
    latest = store.load(SCHEMA, TABLE_NAME)
    assert latest is not None
    lost = latest.files[-1]
    store.storage.delete(f"{file_dir(latest.directory, lost)}/{lost.name}")
    return lost.name


def test_an_incomplete_latest_version_is_read_around_refused_for_writes_and_repaired(storage: Storage, capsys) -> None:  # type: ignore[no-untyped-def]
    store = TableStore(storage)
    commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, 1))
    commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, 10))
    lost = break_latest_version(store)
    capsys.readouterr()
    fallback = store.load(SCHEMA, TABLE_NAME)
    assert fallback is not None and fallback.version == 1 and ids(store, fallback) == [1, 2, 3]
    warnings = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"WARNING"' in line]
    assert len(warnings) == 1 and "version 2 is committed but 1 of its files are missing" in warnings[0]["message"]
    with pytest.raises(IncompleteVersion) as refused:
        commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, 20))
    message = str(refused.value)
    assert lost in message and f"records-destination repair {SCHEMA}.{TABLE_NAME} --root {storage.spec.root}" in message
    assert store.latest_version_number(layout.table_prefix(SCHEMA, TABLE_NAME)) == 2  # the refused write left nothing

    done = store.repair(SCHEMA, TABLE_NAME)
    assert done == Repair(incomplete=(2,), restored=1, version=3)
    repaired = store.load(SCHEMA, TABLE_NAME)
    assert repaired is not None and repaired.version == 3 and ids(store, repaired) == [1, 2, 3]
    assert validate_version(storage, repaired.directory) == []
    assert store.repair(SCHEMA, TABLE_NAME) is None  # nothing left to repair
    after = commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, 20))
    assert after is not None and after.version == 4 and ids(store, after) == [1, 2, 3, 20, 21, 22]


def test_tables_and_repair_commands_on_an_incomplete_table(configuration, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from destination.cli import main

    storage = open_storage(spec_of(configuration))
    store = TableStore(storage)
    commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, 1))
    commit_one_step(store, SCHEMA, TABLE_NAME, appender(storage, 10))
    break_latest_version(store)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", configuration.get("aws_access_key_id", ""))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", configuration.get("aws_secret_access_key", ""))
    where = ["--root", configuration["root"], "--s3-endpoint", configuration.get("s3_endpoint", "")]
    capsys.readouterr()
    assert main(["tables", *where]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(SCHEMA)]
    assert len(listed) == 1 and listed[0].split()[3:6] == ["1", "3", "1"]
    assert f"run `repair {SCHEMA}.{TABLE_NAME}`" in listed[0]
    assert main(["repair", f"{SCHEMA}.{TABLE_NAME}", *where]) == 0
    assert "version 3 now holds version 1's rows" in capsys.readouterr().out
    assert main(["repair", f"{SCHEMA}.{TABLE_NAME}", *where]) == 0
    assert "nothing to repair" in capsys.readouterr().out
    latest = store.load(SCHEMA, TABLE_NAME)
    assert latest is not None and latest.version == 3 and ids(store, latest) == [1, 2, 3]


def test_rpcs_on_a_table_whose_latest_version_lacks_files(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """DescribeTable answers from the last complete version; a write answers a Task naming the repair command."""
    from destination.protocol import sdk
    from tests.batchfiles import write_csv
    from tests.rpc_helpers import describe, rows_of, table
    from tests.test_write_path import KEY, SYS, create, params, r, write

    t = table("t", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "broken", t)
    write(stub, configuration, "broken", t, tmp_path, replace=[r(1, "a"), r(2, "b")])
    storage = open_storage(spec_of(configuration))
    store = TableStore(storage)
    latest = store.load("broken", "t")
    assert latest is not None
    lost = next(f for f in latest.files if f.rows)
    storage.delete(f"{file_dir(latest.directory, lost)}/{lost.name}")
    described = describe(stub, configuration, "broken", "t")
    assert described.WhichOneof("response") == "table" and [c.name for c in described.table.columns][:3] == ["id", "v", "n"]
    batch = write_csv(tmp_path / "refused.csv.zstd.aes", [c.name for c in t.columns], [r(3, "c")], KEY)
    answer = stub.WriteBatch(sdk.WriteBatchRequest(configuration=configuration, schema_name="broken", table=t,
                                                   replace_files=[str(batch)], keys={str(batch): KEY},
                                                   file_params=params()))
    assert answer.WhichOneof("response") == "task"
    assert f"records-destination repair broken.t --root {configuration['root']}" in answer.task.message
    assert "WriteBatch broken.t" in answer.task.message
    assert store.repair("broken", "t") is not None
    write(stub, configuration, "broken", t, tmp_path, replace=[r(3, "c")])
    assert sorted(row["id"] for row in rows_of(configuration, "broken", "t")) == [3]


def test_the_claim_of_a_version_committed_by_a_writer_that_then_died_is_removed(storage: Storage) -> None:
    class Died(BaseException):
        """The process ends right after the commit record: no housekeeping runs."""

    def die_after_commit(step: str) -> None:
        if step == "after_commit_record":
            raise Died(step)

    commit_one_step(TableStore(storage), SCHEMA, TABLE_NAME, appender(storage, 1))
    with pytest.raises(Died):
        commit_one_step(TableStore(storage, fault=die_after_commit), SCHEMA, TABLE_NAME, appender(storage, 10))
    prefix = layout.table_prefix(SCHEMA, TABLE_NAME)
    assert storage.exists(layout.claim_path(prefix, 2))
    commit_one_step(TableStore(storage), SCHEMA, TABLE_NAME, appender(storage, 20))
    assert [n for n in storage.list_children(f"{prefix}/_log") if ".claim" in n] == []
