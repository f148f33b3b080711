"""Many requests, one Spark job: the `run_units` jobs of requests in flight together share one Spark job.

Group commit, no timer: a submission (one request's task, context and units) finds a free slot (fewer than
`max_running` coalesced jobs running) and starts a job at once, on its own thread, taking with it every submission
queued for the same Spark session (oldest first, up to `max_units` units and `max_submissions` submissions). When
every slot is busy it waits in the queue, and the next job to start takes it along. At one request in flight
nothing waits; at many, the requests that arrive while jobs run share the next scheduling.

Each submission keeps its own outcome: its units run with its own `partial(run_unit, task, ctx)`, its results come
back in its unit order, and a TaskFailure fails only its own request. A failure of Spark itself (the JVM died, the
scheduler failed) fails every submission of that job with the same error (SparkUnavailable, SparkJobFailed).
A request cancelled while queued withdraws its submission (`RequestCancelled`); one whose job is running waits for
the job's end, when no task of it still writes into the request's version (runner.py's straggler guarantee).
"""
from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from destination.process import progress
from destination.process.progress import RequestWork
from destination.runtime.errors import Unavailable

# (result, task start, task end) per unit, and when the request submitted its units (wall clock)
TimedResults = list[tuple[Any, float, float]]

# coalesced jobs at once: a long one never holds every small request back. Measured (the fleet, 8 calls in flight,
# quiet machine): 2 slots 8.3 calls/s local, 3.6 on S3; 4 slots 9.5 and 3.5; 64 (every request its own job) 7.8 and 3.2
MAX_RUNNING_JOBS = 2
MAX_UNITS_PER_JOB = 256  # a submission with more units runs on its own (a big load gains nothing here)
MAX_SUBMISSIONS_PER_JOB = 32
CANCEL_POLL_SECONDS = 0.1


class RequestCancelled(Unavailable):
    """The request was cancelled (or its deadline passed) while its Spark work waited for a job."""


@dataclass(eq=False)
class Submission:
    """One request's units waiting for, or running in, a coalesced job."""

    spark: SparkSession
    run: Callable[[Any], Any]  # partial(run_unit, task, ctx): (index, unit) -> (index, result or TaskFailure)
    units: Sequence[Any]
    description: str
    work: RequestWork | None  # the request's progress (its job groups), None outside a request
    taken: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    results: TimedResults | None = None
    error: BaseException | None = None

    def cancelled(self) -> bool:
        return self.work is not None and self.work.cancelled.is_set()


# one job's runner: (spark, description, items, runs, on_group) -> ((submission, unit), result, start, end) rows
JobFn = Callable[[SparkSession, str, list[tuple[int, int, Any]], list[Callable[[Any], Any]],
                  Callable[[str], None]], list[tuple[tuple[int, int], Any, float, float]]]


class Coalescer:
    """The process's queue of `run_units` submissions and its running coalesced jobs."""

    def __init__(self, run_job: JobFn, max_running: int = MAX_RUNNING_JOBS, max_units: int = MAX_UNITS_PER_JOB,
                 max_submissions: int = MAX_SUBMISSIONS_PER_JOB) -> None:
        self._run_job = run_job
        self.max_running = max_running
        self.max_units = max_units
        self.max_submissions = max_submissions
        self._changed = threading.Condition()
        self._queue: list[Submission] = []
        self._running = 0

    def queued(self) -> int:
        """Submissions waiting for a job (the status page could show it; tests wait on it)."""
        with self._changed:
            return len(self._queue)

    def running(self) -> int:
        """Coalesced jobs running now."""
        with self._changed:
            return self._running

    def run(self, spark: SparkSession, run: Callable[[Any], Any], units: Sequence[Any],
            description: str) -> TimedResults:
        """The submission's (result, start, end) per unit, in unit order, once the job that ran it ended."""
        mine = Submission(spark, run, units, description, progress.current())
        with self._changed:
            self._queue.append(mine)
        while True:
            with self._changed:
                batch = self._next_batch(mine)
                if batch is None:
                    if mine.taken:
                        break
                    if mine.cancelled():
                        self._queue.remove(mine)
                        raise RequestCancelled(f"{description}: the request was cancelled before its Spark job "
                                               "started; nothing of it ran")
                    self._changed.wait(CANCEL_POLL_SECONDS)
                    continue
            try:
                self._run(batch)
            finally:
                with self._changed:
                    self._running -= 1
                    self._changed.notify_all()
            break
        mine.done.wait()
        if mine.error is not None:
            error = copy.copy(mine.error)  # raised on each request's thread: its own traceback
            raise error from mine.error.__cause__
        assert mine.results is not None
        return mine.results

    def _next_batch(self, mine: Submission) -> list[Submission] | None:
        """With the lock held: the batch `mine`'s thread starts now (`mine` first, then the oldest queued for the
        same session, within the bounds), or None when it is taken already or no slot is free."""
        if mine.taken or self._running >= self.max_running:
            return None
        batch, units = [mine], len(mine.units)
        for other in self._queue:
            if len(batch) >= self.max_submissions:
                break
            if other is mine or other.spark is not mine.spark or units + len(other.units) > self.max_units:
                continue
            batch.append(other)
            units += len(other.units)
        for taken in batch:
            taken.taken = True
            self._queue.remove(taken)
        self._running += 1
        return batch

    def _run(self, batch: list[Submission]) -> None:
        """Run the batch as one Spark job and hand every submission its own results (or the job's error)."""
        items = [(s, u, unit) for s, submission in enumerate(batch) for u, unit in enumerate(submission.units)]
        description = batch[0].description + (f" (+{len(batch) - 1} coalesced)" if len(batch) > 1 else "")

        def on_group(group: str) -> None:
            for submission in batch:
                if submission.work is not None:
                    progress.group_started(submission.work, group)
        try:
            rows = self._run_job(batch[0].spark, description, items, [s.run for s in batch], on_group)
        except BaseException as exc:
            for submission in batch:
                submission.error = exc
                submission.done.set()
            return
        per_submission: list[list[tuple[int, Any, float, float]]] = [[] for _ in batch]
        for (s, u), result, start, end in rows:
            per_submission[s].append((u, result, start, end))
        for submission, rows_of in zip(batch, per_submission, strict=True):
            submission.results = [(result, start, end) for _u, result, start, end in sorted(rows_of,
                                                                                            key=lambda r: r[0])]
            submission.done.set()


def run_coalesced_unit(runs: Sequence[Callable[[Any], Any]], item: tuple[int, int, Any]) \
        -> tuple[tuple[int, int], Any, float, float]:
    """In the task: one item (submission, unit, unit) run with its submission's own function, timed."""
    s, u, unit = item
    started = time.time()
    _u, result = runs[s]((u, unit))
    return (s, u), result, started, time.time()

