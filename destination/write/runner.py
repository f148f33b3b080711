"""Driver side: turn work units into Spark jobs and collect the task results.

`run_units`: one task per unit (a bucket or a file). `run_shuffled`: map tasks emit (key, payload) pairs
(payloads are opaque bytes, e.g. Arrow IPC chunks); Spark's shuffle brings every payload of a key to one
reduce task. Keys are partition numbers already, so each partition holds one key. The payloads cross the
shuffle as bytes: no row conversion happens in the JVM.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Iterable, Iterator

from pyspark.sql import SparkSession

from spark_jobs.tasks import JobContext, release_memory

TaskFn = Callable[[JobContext, dict[str, Any]], dict[str, Any]]
MapFn = Callable[[JobContext, dict[str, Any]], Iterable[tuple[int, Any]]]
ReduceFn = Callable[[JobContext, int, list[Any]], dict[str, Any]]


def run_units(spark: SparkSession, task: TaskFn, ctx: JobContext, units: list[dict[str, Any]],
              description: str) -> list[dict[str, Any]]:
    """One task per unit (bucket or file); results come back in unit order."""
    if not units:
        return []
    sc = spark.sparkContext
    sc.setJobDescription(description)
    indexed = list(enumerate(units))
    rdd = sc.parallelize(indexed, numSlices=len(indexed))
    results = rdd.map(partial(_run_one, task, ctx)).collect()
    return [r for _i, r in sorted(results, key=lambda pair: pair[0])]


def run_shuffled(spark: SparkSession, map_task: MapFn, reduce_task: ReduceFn, ctx: JobContext,
                 units: list[dict[str, Any]], partitions: int, description: str) -> list[dict[str, Any]]:
    """Map every unit, shuffle the emitted payloads by key (0 ≤ key < partitions), reduce each key;
    results come back in key order."""
    if not units:
        return []
    sc = spark.sparkContext
    sc.setJobDescription(description)
    pairs = sc.parallelize(units, numSlices=len(units)).flatMap(partial(map_task, ctx))
    results = pairs.partitionBy(partitions, _key_is_partition).mapPartitions(partial(_reduce, reduce_task, ctx)).collect()
    return [r for _key, r in sorted(results, key=lambda pair: pair[0])]


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

