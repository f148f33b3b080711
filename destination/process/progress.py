"""Progress of a long request: a reporter thread reads Spark's status tracker for the request's job groups every
`interval` seconds (ServerOptions.progress_interval) and logs one line (files decoded, tasks done, MB/s, time left),
which it also hands to `publish` (the status page, the tester's progress bar).

The request's work is found through a context variable: the RPC layer opens `tracked(work)` on the request's
thread, and `runner._collect` adds each job group it starts with `job_group_started` (a job shared by several
requests' units: to each of them, `group_started`). Rows are counted inside the
tasks and reach the driver only with a job's results, so they are in the request's final log line, not in these.
"""
from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark import SparkContext

from destination.runtime import logs

MB = 1 << 20


@dataclass
class RequestWork:
    """What a running request is doing: its RPC and table, its batch files (if any), its Spark job groups, and
    once it answers its rows and result."""

    rpc: str
    schema: str
    table: str
    started: float = field(default_factory=time.monotonic)
    files: int = 0  # batch files of the request
    bytes: int = 0  # their size as sent
    groups: list[str] = field(default_factory=list)
    first_job: float | None = None  # when the first Spark job started (monotonic)
    rows: int = 0  # rows read from the batch files, once the write has them (metrics, status page)
    result: str = "error"  # the answer: success | warning | task | error (set when the RPC answers)
    cancelled: threading.Event = field(default_factory=threading.Event)  # set when the RPC ends (cancelled or not)


@dataclass(frozen=True)
class Progress:
    """One reading of a request's progress."""

    rpc: str
    schema: str
    table: str
    elapsed: float
    tasks_done: int
    tasks_total: int
    files: int
    files_decoded: int | None  # None: no stage decodes one file per task (the files were decoded on the driver)
    mb_per_second: float | None
    seconds_left: float | None

    def text(self) -> str:
        parts = []
        if self.files_decoded is not None:
            parts.append(f"{self.files_decoded}/{self.files} batch files decoded")
        if self.mb_per_second is not None:
            parts.append(f"{self.mb_per_second:.1f} MB/s")
        parts.append(f"Spark tasks {self.tasks_done}/{self.tasks_total} done" if self.tasks_total
                     else "no Spark job running")
        parts.append(f"{self.elapsed:.0f}s elapsed")
        if self.seconds_left is not None:
            parts.append(f"about {self.seconds_left:.0f}s left")
        return f"[{self.rpc}] {self.schema}.{self.table}: progress: " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"rpc": self.rpc, "table": f"{self.schema}.{self.table}", "elapsed": round(self.elapsed, 1),
                "tasks_done": self.tasks_done, "tasks_total": self.tasks_total, "files": self.files,
                "files_decoded": self.files_decoded, "mb_per_second": self.mb_per_second,
                "seconds_left": self.seconds_left}


_current: contextvars.ContextVar[RequestWork | None] = contextvars.ContextVar("request_work", default=None)


@contextmanager
def tracked(work: RequestWork) -> Iterator[RequestWork]:
    token = _current.set(work)
    try:
        yield work
    finally:
        _current.reset(token)


def current() -> RequestWork | None:
    return _current.get()


def job_group_started(group: str) -> None:
    """Called by the runner for every Spark job group it starts on the request's thread."""
    work = _current.get()
    if work is not None:
        group_started(work, group)


def group_started(work: RequestWork, group: str) -> None:
    """A job group that runs the request's work (started on its thread, or a job its units share: coalescer.py)."""
    work.groups.append(group)
    if work.first_job is None:
        work.first_job = time.monotonic()


def read_progress(work: RequestWork, context: SparkContext | None) -> Progress:
    """The request's progress from Spark's status tracker (stages of its job groups)."""
    done = total = 0
    decoded: int | None = None
    if context is not None and work.groups:
        try:
            tracker = context.statusTracker()
            for group in list(work.groups):
                for job_id in tracker.getJobIdsForGroup(group):
                    job = tracker.getJobInfo(job_id)
                    infos = [tracker.getStageInfo(s) for s in sorted(job.stageIds)] if job is not None else []
                    stages = [s for s in infos if s is not None]
                    done += sum(s.numCompletedTasks for s in stages)
                    total += sum(s.numTasks for s in stages)
                    if stages and work.files and stages[0].numTasks == work.files:
                        decoded = (decoded or 0) + stages[0].numCompletedTasks  # a decode stage: a file per task
        except Exception:  # the JVM went away: report what is known without Spark
            done = total = 0
    now = time.monotonic()
    elapsed = now - work.started
    spark_elapsed = now - work.first_job if work.first_job is not None else 0.0
    rate = (work.bytes * decoded / work.files / MB / spark_elapsed
            if decoded is not None and work.files and spark_elapsed > 0 else None)
    left = spark_elapsed * (total - done) / done if done and total > done else (0.0 if total and done == total else None)
    return Progress(work.rpc, work.schema, work.table, elapsed, done, total, work.files, decoded,
                    round(rate, 2) if rate is not None else None, round(left, 1) if left is not None else None)


class ProgressReporter:
    """Logs the request's progress every `interval` seconds until stopped (nothing for a request that ends first)."""

    def __init__(self, work: RequestWork, interval: float, publish: Callable[[Progress | None], None]) -> None:
        self._work = work
        self._interval = interval
        self._publish = publish
        self._stopped = threading.Event()
        context = contextvars.copy_context()  # the request's log context (schema, table)
        self._thread = threading.Thread(target=context.run, args=(self._loop,), name="progress", daemon=True)

    def __enter__(self) -> ProgressReporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._publish(None)

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            progress = read_progress(self._work, SparkContext._active_spark_context)
            if self._stopped.is_set():
                return
            logs.info(progress.text())
            self._publish(progress)
