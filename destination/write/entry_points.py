"""One entry per table RPC on the driver: what a request decides, in the order it decides it.

The handlers (destination/rpc/service.py) convert the request into these functions' arguments, call one of them and
convert what it returns into the answer and its log line; the table's lock, metrics and logs stay with them.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from destination.batch_files.reader import FileFormat
from destination.model.table_model import ColumnDef, TableDef
from destination.runtime.errors import BadRequest, CatalogUnreachable, UserActionRequired
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion
from destination.write import migrations
from destination.write.batches import BatchPlan, check_mode, files_format, plan_batch
from destination.write.outcome import BatchRetried as BatchRetried  # re-exported: the handler answers it
from destination.write.outcome import Outcome
from destination.write.staging import staged_for_executors
from destination.write.write_path import WritePath


@dataclass(frozen=True)
class BatchRequest:
    """A WriteBatch or WriteHistoryBatch, as the write needs it."""

    rpc: str  # WRITE_BATCH or WRITE_HISTORY_BATCH: the table's mode must match it
    schema: str
    table: str
    columns: tuple[ColumnDef, ...]  # the request's definition: columns the table lacks are added first (§10.10)
    files: dict[str, list[str]]  # by role (earliest, replace, update, delete), in request order
    keys: dict[str, bytes]  # each file's decryption key
    file_format: FileFormat  # the request's file_params


@dataclass(frozen=True)
class BatchWritten:
    """A batch merged (or found to hold no rows): what the handler logs and observes."""

    files: int
    table: TableDef  # the table as the request found it (column types for the failure metrics)
    outcome: Outcome


def write_batch(writers: WritePath, request: BatchRequest, server_format: str, spark_master: str,
                planned: Callable[[BatchPlan], None]) -> BatchWritten | BatchRetried:
    """WriteBatch and WriteHistoryBatch: the table's mode, its missing columns added (a version of their own), the
    files' format and plan (`planned` sees it before any row moves: progress lines, the status page), a retry
    recognised before anything is staged, the files staged for a cluster's executors, then the merge (which first
    places a table still in key-hash buckets in key ranges, a version of its own: the base it finds under the
    store's claim decides that). docs/ARCHITECTURE.md "Versions of one request" says why these are separate."""
    store, schema, table = writers.store, request.schema, request.table
    current = check_mode(store.load(schema, table), request.rpc)
    writers.tables.ensure_columns(schema, current, request.columns)  # a version of its own
    plan = plan_batch(request.files, request.keys, files_format(request.files, request.file_format, server_format))
    planned(plan)
    if plan.identity.seen_in(current.recent_batches):  # a retry: known before anything is staged for a cluster
        return _retried(store, schema, table, BatchRetried(len(plan.files), current.version))
    started = time.perf_counter()
    with staged_for_executors(plan, store.storage, spark_master) as staged_plan:
        staging_seconds = time.perf_counter() - started
        outcome = writers.writes.write_batch(schema, table, staged_plan, request.rpc, checked=current)
    if isinstance(outcome, BatchRetried):  # committed by a retry racing this one (the merge checks under its claim)
        return _retried(store, schema, table, outcome)
    if staged_plan is not plan:  # files staged for a cluster's executors: the copy's time is the write's too
        outcome = replace(outcome, timings={**outcome.timings, "staging": staging_seconds})
    return BatchWritten(len(plan.files), current.table, outcome)


def _retried(store: TableStore, schema: str, table: str, retried: BatchRetried) -> BatchRetried:
    """A retried request's answer, once the formats and catalog are caught up: its first try may have died between
    its commit and them."""
    latest = store.load(schema, table)
    if latest is not None:
        _publish_latest(store, latest, reading=False)
    return retried


def describe_table(writers: WritePath, schema: str, table: str) -> TableVersion | None:
    """The table's latest version (None: no such table), its formats and catalog entry caught up first (the
    catalog's catch-up only when the catalog can be reached: `_publish_latest`)."""
    current = writers.store.load(schema, table)
    if current is not None:
        _publish_latest(writers.store, current, reading=True)  # formats and catalog left behind by a crash or an outage
    return current


def create_table(writers: WritePath, schema: str, definition: TableDef) -> bool:
    """True: created, in the configured records format; False: it exists with this definition (a retried call).
    Another definition is refused."""
    definition = writers.records.stamp(definition)
    created, difference = writers.tables.create_table(schema, definition)
    if created:
        return True
    if difference:
        raise UserActionRequired(f"the table already exists with another definition: {difference}. "
                                 "Use AlterTable, or drop the table first")
    describe_table(writers, schema, definition.name)  # its first try may have died before the formats and catalog
    return False


def alter_table(writers: WritePath, schema: str, definition: TableDef, drop_columns: bool) -> Outcome:
    return writers.tables.alter_table(schema, definition, drop_columns)


def truncate(writers: WritePath, schema: str, table: str, synced_column: str, cutoff_us: int,
             deleted_column: str | None) -> Outcome:
    """Rows synced before the cutoff removed, or (`deleted_column`) marked deleted, the column added first (a
    version of its own) when the table lacks it; version None: no such table."""
    current = writers.store.load(schema, table)
    if current is None:
        return Outcome(None)
    if current.table.column(synced_column) is None:
        raise BadRequest(f"Truncate {schema}.{table}: no column {synced_column!r}")
    if deleted_column and current.table.column(deleted_column) is None:
        writers.tables.ensure_columns(schema, current, [ColumnDef(deleted_column, "BOOLEAN")])
    return writers.writes.truncate(schema, table, synced_column, cutoff_us, deleted_column)


def migrate(writers: WritePath, schema: str, table: str, details: Any, type_name: Any) -> migrations.MigrationOutcome:
    """One Migrate operation (destination/write/migrations.py); a copy or rename also writes its target table,
    whose lock the caller holds."""
    return migrations.migrate(writers.store, writers.tables, schema, table, details, type_name)


def _publish_latest(store: TableStore, latest: TableVersion, reading: bool) -> None:
    """Bring the formats and the catalog entry up to `latest`. `reading`: the request only reads (DescribeTable,
    a retried CreateTable), so an unreachable catalog stops nothing: the answer comes from storage and the entry is
    caught up by the next commit or request (the hook logged the warning); a write answers UNAVAILABLE."""
    try:
        store.publish_latest(latest)
    except CatalogUnreachable:
        if not reading:
            raise

