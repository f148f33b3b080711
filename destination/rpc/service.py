"""The DestinationConnector servicer: one thin method per RPC.

`_rpc` wraps each method: it parses the configuration, holds the table's lock,
times the call, logs one line when it completes, and maps errors to the answer
the protocol expects (Task, gRPC status) — see errors.py.
"""
from __future__ import annotations

import functools
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from pyspark.sql import SparkSession

from destination.catalogs.catalog_settings import catalog_settings
from destination.catalogs.kinds import open_registry
from destination.model.conversion import failure_summary
from destination.model.table_model import DELETED
from destination.process import metrics
from destination.process.progress import current as current_work
from destination.process.spark_session import trivial_job
from destination.protocol import common, sdk, sdk_grpc
from destination.rpc.configuration import (
    TEST_CATALOG,
    TEST_SPARK,
    TEST_STORAGE,
    configuration_form,
    storage_spec,
)
from destination.rpc.observe import Observer, result_of
from destination.rpc.proto_convert import file_format, table_from_proto, table_to_proto
from destination.rpc.roots import Roots
from destination.rpc.table_locks import TableLocks
from destination.runtime import logs, phases
from destination.runtime.errors import (
    BadRequest,
    CommitConflict,
    DestinationError,
    Unavailable,
    UserActionRequired,
    cause_text,
    scrub,
)
from destination.runtime.settings import ServerOptions
from destination.storage.base import local_root_problem
from destination.storage.s3 import transient_error
from destination.write import entry_points
from destination.write.batches import WRITE_BATCH, WRITE_HISTORY_BATCH, BatchPlan
from destination.write.migrations import migration_target
from destination.write.write_path import WritePath

TARGET_LOCK_SECONDS = 600.0


@contextmanager
def _transient_storage_errors() -> Iterator[None]:
    """pyarrow's S3 failures in this process (Spark tasks return theirs as values: spark_jobs.boundary) that
    outlasted its retries: StorageUnavailable, a retryable answer, rather than an unexpected error."""
    try:
        yield
    except OSError as exc:
        unavailable = transient_error(exc)
        if unavailable is None:
            raise
        raise unavailable from None


class DestinationService(sdk_grpc.DestinationConnectorServicer):
    """The RPCs, over the parts the server's assembly built (destination/rpc/server.py: `assemble`)."""

    def __init__(self, options: ServerOptions, observer: Observer, roots: Roots,
                 spark: Callable[[], SparkSession]) -> None:
        self.options = options
        self.observer = observer
        self.roots = roots
        self.spark = spark
        self.locks = TableLocks()

    # ---- RPCs without a table ------------------------------------------------------------

    @staticmethod
    def _observed(name: str) -> Callable[..., Any]:
        """An RPC without a table, counted and recorded as every RPC is (Observer.request, empty table)."""
        def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(method)
            def run(self: DestinationService, request: Any, context: grpc.ServicerContext) -> Any:
                with self.observer.request(name, "", "") as work:
                    answer = method(self, request, context)
                    work.result = result_of(answer)
                    return answer
            return run
        return wrap

    @_observed("ConfigurationForm")
    def ConfigurationForm(self, request: Any, context: grpc.ServicerContext) -> Any:
        return configuration_form()

    @_observed("Capabilities")
    def Capabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        fmt = "PARQUET" if self.options.batch_file_format == "parquet" else "CSV"
        return sdk.CapabilitiesResponse(batch_file_format=sdk.BatchFileFormat.Value(fmt))

    @_observed("Test")
    def Test(self, request: Any, context: grpc.ServicerContext) -> Any:
        started = time.monotonic()
        try:
            if request.name == TEST_STORAGE:
                self._test_storage(request.configuration)
            elif request.name == TEST_CATALOG:
                self._test_catalog(request.configuration)
            elif request.name == TEST_SPARK:
                if trivial_job(self.spark()) != 4950:
                    raise DestinationError("the trivial Spark job returned a wrong result")
            else:
                return common.TestResponse(failure=f"unknown test {request.name!r}")
        except DestinationError as exc:
            logs.warning(f"[Test] {request.name}: failed: {exc}")
            return common.TestResponse(failure=str(exc))
        except Exception as exc:  # report the real cause to the user
            logs.warning(f"[Test] {request.name}: failed: {type(exc).__name__}: {scrub(str(exc))}")
            return common.TestResponse(failure=f"{type(exc).__name__}: {scrub(str(exc))}")
        logs.info(f"[Test] {request.name}: succeeded in {time.monotonic() - started:.2f}s")
        return common.TestResponse(success=True)

    def _test_catalog(self, configuration: Any) -> None:
        """Read an entry of the configured catalog (none: nothing to test), closing what it opened."""
        config = dict(configuration)
        spec = storage_spec(config, self.options)
        settings = catalog_settings(config, spec.s3_region, spec.access_key_id, spec.secret_access_key)
        if settings.on:
            catalog = open_registry(settings).catalog
            try:
                catalog.location("fivetran_probe", "fivetran_probe")
            finally:
                catalog.close()

    def _test_storage(self, configuration: Any) -> None:
        """Write, read back and delete a probe object directly under the root, leaving the root as it was found:
        a local root that does not exist is a failure naming it, not created (nor are its parents)."""
        spec = storage_spec(dict(configuration), self.options)
        problem = local_root_problem(spec.root, must_exist=True)  # None for s3://
        if problem is not None:
            raise UserActionRequired(f"{problem}: the Test creates nothing; create the folder or fix `root`")
        storage = self.roots.write_path_of(configuration).store.storage
        probe = f".probe-{uuid.uuid4().hex}"
        payload = os.urandom(64)
        with storage.probing_root():
            storage.write_bytes(probe, payload)
            try:
                if storage.read_bytes(probe) != payload:
                    raise UserActionRequired(f"the probe object read back from {storage.url(probe)} differs from what "
                                             "was written")
            finally:
                storage.delete(probe)

    # ---- table RPCs ------------------------------------------------------------------------

    @staticmethod
    def _rpc(name: str, response: Any, table_of: Callable[[Any], tuple[str, str]]) -> Callable[..., Any]:
        def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(method)
            def run(self: DestinationService, request: Any, context: grpc.ServicerContext) -> Any:
                schema, table = table_of(request)
                with self.observer.request(name, schema, table) as work, phases.recording() as timing:
                    context.add_callback(work.cancelled.set)  # a cancelled call's queued Spark work is withdrawn
                    answer = handle(self, request, context, schema, table, timing)
                    work.result = result_of(answer)
                    return answer

            def handle(self: DestinationService, request: Any, context: grpc.ServicerContext, schema: str,
                       table: str, timing: phases.Recorder) -> Any:
                label = f"[{name}] {schema}.{table}"
                started = time.monotonic()
                try:
                    write_path = self.roots.write_path_of(request.configuration)
                    with self.locks.hold(write_path.store.storage.spec.root, schema, table), _transient_storage_errors():
                        result, detail = method(self, request, write_path, schema, table)
                except (UserActionRequired, CommitConflict) as exc:
                    logs.warning(f"{label}: {exc}{_causes(exc)}")
                    message = getattr(exc, "task_message", exc)  # RefusedChange: with an example key, not logged
                    return response(task=common.Task(message=f"{name} {schema}.{table}: {message}"))
                except Unavailable as exc:  # transient: Fivetran retries the request
                    logs.warning(f"{label}: {exc}{_causes(exc)}")
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"{name} {schema}.{table}: {exc}")
                except BadRequest as exc:
                    logs.warning(f"{label}: rejected: {exc}{_causes(exc)}")
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name} {schema}.{table}: {exc}")
                except DestinationError as exc:
                    logs.severe(f"{label}: {exc}{_causes(exc)}")
                    context.abort(grpc.StatusCode.INTERNAL, f"{name} {schema}.{table}: {exc}")
                except Exception as exc:
                    where = "".join(traceback.format_tb(exc.__traceback__, limit=-3)).replace("\n", " | ")
                    logs.severe(f"{label}: unexpected {type(exc).__name__}: {scrub(str(exc))} at {where}")
                    context.abort(grpc.StatusCode.INTERNAL,
                                  f"{name} {schema}.{table}: unexpected {type(exc).__name__}: {scrub(str(exc))}")
                seconds = time.monotonic() - started
                spent = timing.rounded()
                for phase, phase_seconds in spent.items():
                    metrics.REQUEST_PHASE_SECONDS.labels(phase).observe(phase_seconds)
                logs.info(f"{label}: {detail} in {seconds:.3f}s",
                          {"seconds": round(seconds, 4), "phases": spent} if spent else None)
                return result
            return run
        return wrap

    @_rpc("DescribeTable", sdk.DescribeTableResponse, lambda r: (r.schema_name, r.table_name))
    def DescribeTable(self, request: Any, write_path: WritePath, schema: str, table: str) -> tuple[Any, str]:
        current = entry_points.describe_table(write_path, schema, table)
        if current is None:
            return sdk.DescribeTableResponse(not_found=True), "not found"
        return sdk.DescribeTableResponse(table=table_to_proto(current.table)), f"version {current.version}"

    @_rpc("CreateTable", sdk.CreateTableResponse, lambda r: (r.schema_name, r.table.name))
    def CreateTable(self, request: Any, write_path: WritePath, schema: str, table: str) -> tuple[Any, str]:
        definition = table_from_proto(request.table)
        if entry_points.create_table(write_path, schema, definition):
            return sdk.CreateTableResponse(success=True), f"created with {len(definition.columns)} columns"
        return sdk.CreateTableResponse(success=True), "already exists with this definition"

    @_rpc("AlterTable", sdk.AlterTableResponse, lambda r: (r.schema_name, r.table.name))
    def AlterTable(self, request: Any, write_path: WritePath, schema: str, table: str) -> tuple[Any, str]:
        outcome = entry_points.alter_table(write_path, schema, table_from_proto(request.table), request.drop_columns)
        return sdk.AlterTableResponse(success=True), f"version {outcome.version}"

    @_rpc("Truncate", sdk.TruncateResponse, lambda r: (r.schema_name, r.table_name))
    def Truncate(self, request: Any, write_path: WritePath, schema: str, table: str) -> tuple[Any, str]:
        cutoff_us = request.utc_delete_before.seconds * 1_000_000 + request.utc_delete_before.nanos // 1000
        deleted = request.soft.deleted_column if request.HasField("soft") else None
        if request.HasField("soft") and not deleted:
            deleted = DELETED
        outcome = entry_points.truncate(write_path, schema, table, request.synced_column or "_fivetran_synced",
                                    cutoff_us, deleted)
        if outcome.version is None:
            return sdk.TruncateResponse(success=True), "table does not exist: nothing to truncate"
        return sdk.TruncateResponse(success=True), f"{'soft' if deleted else 'hard'}: {outcome.counts} version {outcome.version}"

    def _write(self, rpc: str, request: Any, write_path: WritePath, schema: str, table: str,
               files: dict[str, list[str]]) -> tuple[Any, str]:
        """WriteBatch and WriteHistoryBatch: the request as the write needs it, its answer and observation."""
        work = current_work()

        def planned(plan: BatchPlan) -> None:  # the request's files, for its progress lines and the status page
            if work is not None:
                self.observer.batch(rpc, work, plan)
        batch = entry_points.BatchRequest(rpc=rpc, schema=schema, table=table,
                                      columns=tuple(table_from_proto(request.table).columns), files=files,
                                      keys=dict(request.keys), file_format=file_format(request.file_params))
        result = entry_points.write_batch(write_path, batch, self.options.batch_file_format,
                                      self.options.spark_master, planned)
        if isinstance(result, entry_points.BatchRetried):
            self.observer.retried()
            return (sdk.WriteBatchResponse(success=True),
                    f"{result.files} files already applied in version {result.version} (retried request)")
        outcome = result.outcome
        if work is not None:
            self.observer.written(rpc, work, result.table, outcome)
        for failure, count in sorted(outcome.failures_by_column.items()):
            logs.warning(f"[{rpc}] {schema}.{table}: {failure_summary(failure, count)}")
        return sdk.WriteBatchResponse(success=True), (f"{outcome.data_rows} rows from {result.files} files: "
                                                      f"{outcome.counts}, version {outcome.version} "
                                                      f"({outcome.timing_text()})")

    @_rpc("WriteBatch", sdk.WriteBatchResponse, lambda r: (r.schema_name, r.table.name))
    def WriteBatch(self, request: Any, write_path: WritePath, schema: str, table: str) -> tuple[Any, str]:
        return self._write(WRITE_BATCH, request, write_path, schema, table, {
            "replace": list(request.replace_files), "update": list(request.update_files),
            "delete": list(request.delete_files)})

    @_rpc("WriteHistoryBatch", sdk.WriteBatchResponse, lambda r: (r.schema_name, r.table.name))
    def WriteHistoryBatch(self, request: Any, write_path: WritePath, schema: str, table: str) -> tuple[Any, str]:
        return self._write(WRITE_HISTORY_BATCH, request, write_path, schema, table, {
            "earliest": list(request.earliest_start_files), "replace": list(request.replace_files),
            "update": list(request.update_files), "delete": list(request.delete_files)})

    @_rpc("Migrate", sdk.MigrateResponse, lambda r: (r.details.schema, r.details.table))
    def Migrate(self, request: Any, write_path: WritePath, schema: str, table: str) -> tuple[Any, str]:
        target = migration_target(request.details)
        if target and target != table:  # a copy or rename also writes its target: hold that table too
            with self.locks.hold(write_path.store.storage.spec.root, schema, target, timeout=TARGET_LOCK_SECONDS):
                outcome = entry_points.migrate(write_path, schema, table, request.details, common.DataType.Name)
        else:
            outcome = entry_points.migrate(write_path, schema, table, request.details, common.DataType.Name)
        if not outcome.supported:
            return sdk.MigrateResponse(unsupported=True), outcome.detail
        return sdk.MigrateResponse(success=True), outcome.detail


def _causes(exc: BaseException) -> str:
    """`; caused by …` for the log line of an error raised from another (a Spark task's, a library's)."""
    text = cause_text(exc)
    return f"; caused by {text}" if text else ""
