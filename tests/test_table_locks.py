"""The in-process table locks (destination/rpc/table_locks.py): one request per table at a time, and no lock kept
for a table no request is using (a server that runs for weeks sees tables come and go)."""
from __future__ import annotations

import threading
import time

import pytest

from destination.rpc.table_locks import TableLocks
from destination.runtime.errors import CommitConflict

pytestmark = pytest.mark.unit


def test_no_lock_is_kept_for_a_table_no_request_is_using() -> None:
    locks = TableLocks()
    for i in range(1_000):  # a long-running server writing 1,000 tables one after the other
        with locks.hold("root", "s", f"t{i}"):
            assert len(locks) == 1
    assert len(locks) == 0
    with locks.hold("root", "s", "t0"), pytest.raises(CommitConflict), locks.hold("root", "s", "t0", timeout=0.01):
        pass  # a request that gave up waiting leaves the holder's lock in place
    assert len(locks) == 0


def test_a_tables_requests_never_overlap_while_its_lock_comes_and_goes() -> None:
    """Threads hammer two tables; per table, at most one is inside at any time (the oracle: a per-table counter of
    threads inside, checked on entry), though each lock is dropped and made anew whenever no one uses it."""
    locks = TableLocks()
    inside = {"a": 0, "b": 0}
    overlaps: list[str] = []
    guard = threading.Lock()

    def work(n: int) -> None:
        for i in range(200):
            table = "ab"[(n + i) % 2]
            with locks.hold("root", "s", table):
                with guard:
                    inside[table] += 1
                    if inside[table] > 1:
                        overlaps.append(table)
                time.sleep(0.0001)
                with guard:
                    inside[table] -= 1

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and len(locks) == 0
