"""Spark jobs of a table change: the job's context, the units of operations held on the driver, and the run.

Every class that changes a table runs its Spark work through one JobRunner (destination/write/runner.py does the
running; this is what a table change adds: its target version, change files and placement settings).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from destination.changes.change_settings import ChangeSettings
from destination.changes.files import ChangeTarget
from destination.changes.metadata import KIND_SNAPSHOT, ChangeFile, ChangeParts
from destination.model.key_order import key_columns_of
from destination.model.table_model import TableDef
from destination.on_disk.datafiles import DataFile
from destination.on_disk.placement import TARGET_FILE_BYTES, KeySample, plan_units
from destination.storage.base import StorageSpec
from destination.store.versions import TableVersion, VersionTarget
from destination.write.runner import run_units
from spark_jobs.contracts import FilesWritten, JobContext, RangeUnit, RequestCounts
from spark_jobs.operations import to_ipc

U = TypeVar("U")
R = TypeVar("R")

# sizing units before any Parquet exists: decoded operations (and runs staged uncompressed on a local scratch
# disk) are a few times larger than the Parquet they become (measured on the benchmark's 20-column table: 3.5x)
DECODED_TO_PARQUET = 3.5


@dataclass(frozen=True, kw_only=True)
class PlacementSettings:
    """A destination's placement settings: the target data-file size (configuration field target_file_size) and
    where sorted runs are staged (a local directory in Spark's local mode; None: the table's own storage, which a
    cluster's executors reach)."""

    target_file_bytes: int = TARGET_FILE_BYTES
    scratch: StorageSpec | None = None


@dataclass
class JobOutput:
    """What one Spark job's tasks produced, summed over its units."""

    new_files: list[DataFile]
    replaced: set[str]  # base files rewritten (not carried)
    counts: dict[str, int]
    changes: list[ChangeFile]  # change files, in unit order
    request: RequestCounts = field(default_factory=RequestCounts)  # a write's rows and failures

    task_seconds: float = 0.0  # summed over the tasks that report it

    @staticmethod
    def of(results: Sequence[FilesWritten], request: RequestCounts | None = None) -> JobOutput:
        counts: Counter[str] = Counter()
        for r in results:
            counts.update(r.counts)
        replaced = {name for r in results for name in r.replaced}
        if "files_rewritten" in counts:  # a file cut between units is rewritten by each, and counted once
            counts["files_rewritten"] = len(replaced)
        return JobOutput(new_files=[f for r in results for f in r.new_files],
                         replaced=replaced, counts=dict(counts),
                         changes=[c for r in results for c in r.changes], request=request or RequestCounts(),
                         task_seconds=sum(r.seconds for r in results))

    def change_parts(self, kind: str) -> ChangeParts:
        return ChangeParts(kind=kind, files=tuple(self.changes), noop_updates=self.counts.get("noop_updates", 0))


class JobRunner:
    """Runs a table change's Spark jobs: each job's context (storage, base and target versions, change target,
    placement) and, for operations held on the driver, its units over the table's key ranges."""

    def __init__(self, storage: StorageSpec, spark: Callable[[], SparkSession], changes: ChangeSettings,
                 placement: PlacementSettings) -> None:
        self._storage = storage
        self._spark = spark
        self._changes = changes
        self._placement = placement

    def context(self, schema: str, base: TableVersion | None, target: VersionTarget, table: TableDef,
                kind: str) -> JobContext:
        changes = self.change_target(schema, target, kind) if self._changes.enabled else None
        return JobContext(storage=self._storage, base_dir=base.directory if base else None,
                          target_dir=target.directory, table=table, version=target.version, changes=changes,
                          target_file_bytes=self._placement.target_file_bytes, scratch=self._placement.scratch)

    def change_target(self, schema: str, target: VersionTarget, kind: str) -> ChangeTarget:
        return ChangeTarget(settings=self._changes, directory=target.changes_directory, version=target.version,
                            timestamp_us=int(target.timestamp * 1_000_000), schema=schema, kind=kind)

    def run(self, task: Callable[[JobContext, U], FilesWritten], schema: str, base: TableVersion | None,
            target: VersionTarget, table: TableDef, units: Sequence[U], description: str,
            kind: str = KIND_SNAPSHOT) -> JobOutput:
        """Run `task` over `units` as one Spark job writing version `target`; with change files on, the tasks
        also write the version's change files of `kind` (KIND_ROWS: their events, KIND_SNAPSHOT: the rows they
        write)."""
        ctx = self.context(schema, base, target, table, kind)
        return JobOutput.of(self.results(task, ctx, units, description))

    def results(self, task: Callable[[JobContext, U], R], ctx: JobContext, units: Sequence[U],
                description: str) -> list[R]:
        """One task per unit in `ctx`; their results in unit order."""
        return run_units(self._spark(), task, ctx, units, description)

    def units_of_operations(self, base_files: Sequence[DataFile], ops: pa.Table, table: TableDef) -> list[RangeUnit]:
        """Operations held here (a small request, a key change) routed to the units of the table's key ranges:
        one unit per range that receives operations or compacts files, each with its operations as one chunk."""
        keys = key_columns_of(ops, table)
        plan = plan_units(base_files, KeySample.exact(keys), table, self._placement.target_file_bytes,
                          bytes_per_row=ops.nbytes / max(1, ops.num_rows) / DECODED_TO_PARQUET)
        unit_of = plan.unit_of(keys)
        order = np.argsort(unit_of, kind="stable")
        ops, unit_of = ops.take(pa.array(order)), unit_of[order]
        starts = np.searchsorted(unit_of, np.arange(len(plan.units) + 1))
        units = []
        for u, planned in enumerate(plan.units):
            a, b = int(starts[u]), int(starts[u + 1])
            if a == b and not planned.compact:
                continue
            chunks = (to_ipc(ops.slice(a, b - a)),) if b > a else ()
            units.append(RangeUnit(lo=planned.lo, hi=planned.hi, files=planned.files, compact=planned.compact,
                                   chunks=chunks, tag=u))
        return units
