"""A large complete-layout carry-forward on S3 as a Spark job of copy tasks (`TableStore` calls it through its
`Copies` hook): the server-side copies are fanned out over the executors instead of one driver thread pool."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession

from destination.model.table_model import TableDef
from destination.runtime import logs
from destination.storage.base import StorageSpec
from destination.write.runner import run_units
from spark_jobs.contracts import CopyUnit, JobContext
from spark_jobs.tasks.copy_files import copy_files_task

FILES_PER_TASK = 32


class SparkCopies:
    """Copies (source, target) pairs with one Spark task per FILES_PER_TASK pairs."""

    def __init__(self, spark: Callable[[], SparkSession]) -> None:
        self._spark = spark

    def __call__(self, spec: StorageSpec, table: TableDef, directory: str, version: int,
                 pairs: Sequence[tuple[str, str]]) -> None:
        units = [CopyUnit(pairs=tuple(pairs[i:i + FILES_PER_TASK])) for i in range(0, len(pairs), FILES_PER_TASK)]
        ctx = JobContext(storage=spec, base_dir=None, target_dir=directory, table=table, version=version)
        results = run_units(self._spark(), copy_files_task, ctx, units, f"carry {len(pairs)} files into {directory}")
        logs.info(f"{directory}: {sum(r.files for r in results)} files copied by {len(units)} Spark tasks "
                  f"({sum(r.seconds for r in results):.1f}s summed)")
