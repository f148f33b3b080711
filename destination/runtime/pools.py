"""Thread pools kept for the life of a process, for short overlapped I/O (a CSV file's next chunk read while the
last one parses, a version's metadata files written together, the table formats committed side by side).

A pool per call started a thread per call: about 1-2 ms each on a small request, paid by every small sync. A pool is
made on first use in each process and made again in a forked child (a fork copies the pool but none of its threads,
and work submitted there would never run). Work submitted to one must never wait on work of the same pool.
"""
from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

_lock = threading.Lock()
_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """This process's pool `name` (made with `workers` threads the first time it is asked for)."""
    pid = os.getpid()
    made = _pools.get(name)
    if made is not None and made[0] == pid:
        return made[1]
    with _lock:
        made = _pools.get(name)
        if made is None or made[0] != pid:
            made = _pools[name] = (pid, ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name))
        return made[1]


class Started:
    """Calls running in a pool (`start`) while their caller goes on."""

    def __init__(self, futures: list[Future[object]]) -> None:
        self._futures = futures

    def wait(self) -> None:
        """Every call ended; the first failure (in the calls' order) raised."""
        wait(self._futures)
        for future in self._futures:
            future.result()


def start(name: str, workers: int, calls: Sequence[Callable[[], object]]) -> Started:
    """Start `calls` in the pool `name`, each in a copy of the caller's context (its log fields). A pool that takes
    no more work (the interpreter is exiting) raises its RuntimeError once the calls it took ended."""
    pool = shared_pool(name, workers)
    futures: list[Future[object]] = []
    try:
        for call in calls:
            futures.append(pool.submit(contextvars.copy_context().run, call))
    except BaseException:
        wait(futures)
        raise
    return Started(futures)


def side_by_side(name: str, workers: int, calls: Sequence[Callable[[], object]]) -> None:
    """Run `calls` at once in the pool `name` (one alone runs here, `start`); every call has ended when this
    returns, and the first failure (in the calls' order) is raised."""
    if len(calls) < 2:
        for call in calls:
            call()
        return
    start(name, workers, calls).wait()
