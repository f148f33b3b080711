"""The driver's parts that change a root's tables, assembled for one configuration (its change files, placement
and small-request settings): what the entries of destination/write/entry_points.py work with."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from destination.changes.change_settings import ChangeSettings
from destination.records_formats.choice import RecordsChoice
from destination.runtime.settings import SMALL_REQUEST_BYTES
from destination.store.table_store import TableStore
from destination.write.jobs import JobRunner, PlacementSettings
from destination.write.sorted_runs import SortedRuns
from destination.write.table_definitions import TableDefinitions
from destination.write.table_writes import TableWrites
from destination.write.with_changes import CommitsWithChanges


@dataclass(frozen=True)
class WritePath:
    store: TableStore
    tables: TableDefinitions  # CreateTable, AlterTable, added columns, the migrations' rewrites
    writes: TableWrites  # WriteBatch's merge, placement in key ranges, Truncate
    records: RecordsChoice  # the records format of tables created from now on (a table keeps its own)


def write_path_for(store: TableStore, spark: Callable[[], SparkSession], changes: ChangeSettings | None = None,
            small_request: int = SMALL_REQUEST_BYTES, placement: PlacementSettings | None = None,
            records: RecordsChoice | None = None) -> WritePath:
    """`small_request`: batch files up to this size (as sent) are decoded on the driver."""
    changes = changes or ChangeSettings()
    placement = placement or PlacementSettings()
    jobs = JobRunner(store.storage.spec, spark, changes, placement)
    commits = CommitsWithChanges(store, jobs, changes)
    runs = SortedRuns(jobs, store.storage, placement)
    return WritePath(store, TableDefinitions(store, jobs, commits),
                   TableWrites(jobs, runs, commits, changes, small_request), records or RecordsChoice())
