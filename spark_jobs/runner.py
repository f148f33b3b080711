"""Driver side: turn a list of work units into one Spark job and collect the task results."""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

from pyspark.sql import SparkSession

from spark_jobs.tasks import JobContext

TaskFn = Callable[[JobContext, dict[str, Any]], dict[str, Any]]


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


def _run_one(task: TaskFn, ctx: JobContext, item: tuple[int, dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    index, unit = item
    return index, task(ctx, unit)
