"""Process-wide thread pools (destination/runtime/pools.py): one per name per process, and a new one in a forked
child, where the parent's pool has no threads left to run anything submitted to it."""
from __future__ import annotations

import os
import threading

import pytest

from destination.runtime.pools import shared_pool

pytestmark = pytest.mark.unit


def test_one_pool_per_name_and_its_work_runs() -> None:
    pool = shared_pool("test-pools-a", 2)
    assert shared_pool("test-pools-a", 2) is pool
    assert shared_pool("test-pools-b", 2) is not pool
    names = {pool.submit(lambda: threading.current_thread().name).result(timeout=10) for _ in range(4)}
    assert names and all(name.startswith("test-pools-a") for name in names)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_gets_a_pool_that_runs_its_work() -> None:
    parent = shared_pool("test-pools-fork", 1)
    assert parent.submit(lambda: 1).result(timeout=10) == 1  # the parent's pool has started its thread
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: work submitted must run within the timeout (a copied pool would never run it)
        try:
            child = shared_pool("test-pools-fork", 1)
            answer = child.submit(os.getpid).result(timeout=10)
            os.write(write, b"ok" if child is not parent and answer == os.getpid() else b"no")
        except BaseException:
            os.write(write, b"no")
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 2)
    os.waitpid(pid, 0)
    os.close(read)
    assert got == b"ok"
