"""Writers taking over an abandoned claim, on both backends: the takeover is exclusive, a commit never lacks a file,
and a table whose latest committed version is incomplete stays readable and can be repaired."""
from __future__ import annotations

import json
import socket
import subprocess
import threading
from typing import Any

import pytest

from destination.storage.base import Storage
from destination.table_store import layout
from destination.table_store.store import TableStore
from destination.validator import validate_version
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
    TableStore(storage).write(SCHEMA, TABLE_NAME, appender(storage, 1))
    leave_stale_claim(storage, 2)
    prefix = layout.table_prefix(SCHEMA, TABLE_NAME)
    race = TakeoverRace(prefix, 2)
    errors: list[BaseException] = []

    def writer(first_id: int) -> None:
        store = TableStore(HookedStorage(storage, race.before, race.after), fault=race.fault)  # type: ignore[arg-type]
        try:
            store.write(SCHEMA, TABLE_NAME, appender(storage, first_id))
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
