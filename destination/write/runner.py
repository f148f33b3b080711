"""Driver side: turn work units into Spark jobs and collect the task results.

`run_units`: one task per unit (a bucket or a file). `run_shuffled`: map tasks emit (key, payload) pairs
(payloads are opaque bytes, e.g. Arrow IPC chunks); Spark's shuffle brings every payload of a key to one
reduce task. Keys are partition numbers already, so each partition holds one key. The payloads cross the
shuffle as bytes: no row conversion happens in the JVM.

Errors: a task returns a TaskFailure instead of raising (spark_jobs.boundary). Our own errors are raised here
again as themselves, chained to a `TaskTrace` that says where in the task they happened; any other exception of
a task is a `TaskFailed` (an INTERNAL answer: a bug, or a library error no backend translated), and a job that
Spark itself could not run is a `SparkJobFailed` chained to Spark's exception, or `SparkUnavailable` when its JVM
died (the session is discarded). No exception text is parsed.

Every job runs in a job group of its own; when it fails, the driver waits (bounded) until the job's other tasks
have stopped before it returns: they may still be writing files into the version about to be cleaned up.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, NoReturn, TypeVar

from pyspark import SparkContext
from pyspark.sql import SparkSession

from destination.process import metrics, progress
from destination.process.spark_session import discard_if_dead
from destination.runtime import phases
from destination.runtime.errors import DestinationError, SparkUnavailable
from destination.write.coalescer import Coalescer, TimedResults, run_coalesced_unit
from spark_jobs.boundary import TaskFailure, map_unit, reduce_partition, run_unit
from spark_jobs.contracts import JobContext

U = TypeVar("U")
R = TypeVar("R")
P = TypeVar("P")
T = TypeVar("T")
# a failed job's other tasks are killed without interrupting them, so their Python workers are destroyed after
# spark.python.task.killTimeout (2 s); this bounds how long the driver waits for that
STRAGGLER_WAIT_SECONDS = 60.0


class TaskTrace(Exception):
    """The cause chained to an error raised from a Spark task: the task's exception and where it was raised."""


class TaskFailed(DestinationError):
    """A Spark task raised an exception that is not one of ours."""


class SparkJobFailed(DestinationError):
    """Spark could not run the job (its JVM, an executor or the scheduler failed); the cause is Spark's exception."""


def raise_task_failure(failure: TaskFailure) -> NoReturn:
    trace = TaskTrace(f"{failure.exception}: {failure.message} (in the Spark task, at {failure.where})")
    if failure.error is not None:
        raise failure.error from trace
    raise TaskFailed(f"a Spark task failed: {failure.exception}: {failure.message}") from trace


def _results(pairs: Iterable[tuple[int, R | TaskFailure]]) -> list[R]:
    """The results in key (unit) order; the first failure, by key, is raised."""
    ordered = sorted(pairs, key=lambda pair: pair[0])
    for _key, result in ordered:
        if isinstance(result, TaskFailure):
            raise_task_failure(result)
    return [result for _key, result in ordered if not isinstance(result, TaskFailure)]


def run_units(spark: SparkSession, task: Callable[[JobContext, U], R], ctx: JobContext, units: Sequence[U],
              description: str) -> list[R]:
    """One task per unit (bucket or file); results come back in unit order. The job may be shared with other
    requests' units (coalescer.py): their results and failures stay theirs."""
    if not units:
        return []
    submitted = time.time()
    run = partial(run_unit, task, ctx)
    timed: TimedResults
    if len(units) > COALESCER.max_units:
        indexed = list(enumerate(units))  # a big job: on its own, as it is
        timed = [(pair[1], start, end) for pair, start, end in _collect(
            spark, description, lambda sc: sc.parallelize(indexed, numSlices=len(indexed))
            .map(partial(_timed_unit, run)).collect())]
    else:
        timed = COALESCER.run(spark, run, units, description)
    phases.spark_job(submitted, [(start, end) for _result, start, end in timed], time.time())
    return _results(enumerate(result for result, _start, _end in timed))


def _run_coalesced_job(spark: SparkSession, description: str, items: list[tuple[int, int, Any]],
                       runs: list[Callable[[Any], Any]], on_group: Callable[[str], None]) \
        -> list[tuple[tuple[int, int], Any, float, float]]:
    """One Spark job of several requests' units, a task each."""
    rows: list[tuple[tuple[int, int], Any, float, float]] = _collect(
        spark, description, lambda sc: sc.parallelize(items, numSlices=len(items))
        .map(partial(run_coalesced_unit, runs)).collect(), on_group=on_group)
    return rows


COALESCER = Coalescer(_run_coalesced_job)


def _timed_unit(run: Callable[[T], P], item: T) -> tuple[P, float, float]:
    """A unit's result with its task's start and end (wall clock): the request's phases split the job by them."""
    started = time.time()
    result = run(item)
    return result, started, time.time()


def run_shuffled(spark: SparkSession, map_task: Callable[[JobContext, U], Iterable[tuple[int, P]]],
                 reduce_task: Callable[[JobContext, int, list[P]], R], ctx: JobContext, units: Sequence[U],
                 partitions: int, description: str) -> list[R]:
    """Map every unit, shuffle the emitted payloads by key (0 ≤ key < partitions), reduce each key;
    results come back in key order."""
    if not units:
        return []
    pairs = _collect(spark, description, lambda sc: sc.parallelize(list(units), numSlices=len(units))
                     .flatMap(partial(map_unit, map_task, ctx)).partitionBy(partitions, _key_is_partition)
                     .mapPartitions(partial(reduce_partition, reduce_task, ctx)).collect())
    return _results(pairs)


def _collect(spark: SparkSession, description: str, job: Callable[[SparkContext], T],
             on_group: Callable[[str], None] = progress.job_group_started) -> T:
    """Run `job` in a job group of its own. When it fails, return only after its other tasks have stopped:
    they may still be writing files into the version the caller is about to clean up (and retry). A job that
    failed because the JVM died is SparkUnavailable (retryable: the next job gets a new session); any other
    failure of Spark itself is SparkJobFailed. Whatever the job's PySpark calls raise once the JVM is gone (a
    refused connection, or an AttributeError on the context the health check has already stopped), including the
    call that names the job group, counts as the JVM's death when `spark`'s JVM died. `on_group` hands the group
    to the progress of the requests whose units the job runs."""
    sc = spark.sparkContext
    group = uuid.uuid4().hex
    kind = job_kind(description)
    started = time.monotonic()
    try:
        sc.setJobGroup(group, description)
        on_group(group)
        result = job(sc)
        metrics.SPARK_JOB_SECONDS.labels(kind).observe(time.monotonic() - started)
        return result
    except Exception as exc:
        metrics.SPARK_JOBS_FAILED.labels(kind).inc()
        _wait_for_tasks(sc, group)
        if discard_if_dead(spark):
            raise SparkUnavailable("the Spark JVM stopped during the job (killed or out of memory); "
                                   "a new Spark session is starting, retry the request") from exc
        raise SparkJobFailed(f"the Spark job {description!r} failed: {type(exc).__name__}") from exc


def job_kind(description: str) -> str:
    """A job's kind for its metric label: its description without the table (`WriteBatch s.t` → `WriteBatch`)."""
    return description.split(" ", 1)[0] or "job"


def _wait_for_tasks(sc: SparkContext, group: str) -> None:
    """Wait (bounded) until no task of the group's jobs is running; nothing to wait for when the JVM is gone."""
    deadline = time.monotonic() + STRAGGLER_WAIT_SECONDS
    try:
        tracker = sc.statusTracker()
        while time.monotonic() < deadline:
            jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(group)]
            stages = [tracker.getStageInfo(stage) for job in jobs if job is not None for stage in job.stageIds]
            if not any(stage is not None and stage.numActiveTasks > 0 for stage in stages):
                return
            time.sleep(0.1)
    except Exception:  # the JVM died with the job: its tasks died with it
        return


def _key_is_partition(key: int) -> int:
    return key
