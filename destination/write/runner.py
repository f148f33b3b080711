"""Driver side: turn work units into Spark jobs and collect the task results.

`run_units`: one task per unit (a bucket or a file). `run_shuffled`: map tasks emit (key, payload) pairs
(payloads are opaque bytes, e.g. Arrow IPC chunks); Spark's shuffle brings every payload of a key to one
reduce task. Keys are partition numbers already, so each partition holds one key. The payloads cross the
shuffle as bytes: no row conversion happens in the JVM.
"""
from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any, Callable, Iterable, Iterator, TypeVar

from pyspark import SparkContext
from pyspark.sql import SparkSession

from spark_jobs.tasks import JobContext, release_memory

TaskFn = Callable[[JobContext, dict[str, Any]], dict[str, Any]]
MapFn = Callable[[JobContext, dict[str, Any]], Iterable[tuple[int, Any]]]
ReduceFn = Callable[[JobContext, int, list[Any]], dict[str, Any]]
T = TypeVar("T")
# a failed job's other tasks are killed without interrupting them, so their Python workers are destroyed after
# spark.python.task.killTimeout (2 s); this bounds how long the driver waits for that
STRAGGLER_WAIT_SECONDS = 60.0


def run_units(spark: SparkSession, task: TaskFn, ctx: JobContext, units: list[dict[str, Any]],
              description: str) -> list[dict[str, Any]]:
    """One task per unit (bucket or file); results come back in unit order."""
    if not units:
        return []
    sc = spark.sparkContext
    indexed = list(enumerate(units))
    results = _collect(sc, description, lambda: sc.parallelize(indexed, numSlices=len(indexed))
                       .map(partial(_run_one, task, ctx)).collect())
    return [r for _i, r in sorted(results, key=lambda pair: pair[0])]


def run_shuffled(spark: SparkSession, map_task: MapFn, reduce_task: ReduceFn, ctx: JobContext,
                 units: list[dict[str, Any]], partitions: int, description: str) -> list[dict[str, Any]]:
    """Map every unit, shuffle the emitted payloads by key (0 ≤ key < partitions), reduce each key;
    results come back in key order."""
    if not units:
        return []
    sc = spark.sparkContext
    results = _collect(sc, description, lambda: sc.parallelize(units, numSlices=len(units))
                       .flatMap(partial(map_task, ctx)).partitionBy(partitions, _key_is_partition)
                       .mapPartitions(partial(_reduce, reduce_task, ctx)).collect())
    return [r for _key, r in sorted(results, key=lambda pair: pair[0])]


def _collect(sc: SparkContext, description: str, job: Callable[[], T]) -> T:
    """Run `job` in a job group of its own. When it fails, return only after its other tasks have stopped:
    they may still be writing files into the version the caller is about to clean up (and retry)."""
    group = uuid.uuid4().hex
    sc.setJobGroup(group, description)
    try:
        return job()
    except Exception:
        _wait_for_tasks(sc, group)
        raise


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


def _reduce(task: ReduceFn, ctx: JobContext, pairs: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    grouped: dict[int, list[Any]] = {}
    for key, payload in pairs:
        grouped.setdefault(key, []).append(payload)
    for key, payloads in grouped.items():
        try:
            yield key, task(ctx, key, payloads)
        finally:
            release_memory()


def _run_one(task: TaskFn, ctx: JobContext, item: tuple[int, dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    index, unit = item
    try:
        return index, task(ctx, unit)
    finally:
        release_memory()

