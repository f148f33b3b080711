"""The RPC layer's observation of its requests: metrics (destination/process/metrics.py), the status page's memory
(activity.py), progress lines of long requests (destination/process/progress.py) and the log context of a request."""
from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from destination.model.table_model import TableDef
from destination.process import metrics
from destination.process.progress import ProgressReporter, RequestWork, tracked
from destination.rpc.activity import Activity, RequestRecord
from destination.runtime import logs
from destination.runtime.settings import ServerOptions
from destination.store.versions import CommitEvent
from destination.write.batches import BatchPlan
from destination.write.outcome import Outcome

LONG_RPCS = frozenset({"WriteBatch", "WriteHistoryBatch", "AlterTable", "Migrate"})  # with progress lines


def result_of(response: Any) -> str:
    """success | warning | task, from a response's `response` field (`unsupported` counts as a warning, a Test's
    `failure` as a task: the user must act)."""
    has_oneof = hasattr(response, "DESCRIPTOR") and "response" in response.DESCRIPTOR.oneofs_by_name
    which = response.WhichOneof("response") if has_oneof else None  # ConfigurationForm's answer has none
    if which in ("task", "failure"):
        return "task"
    if which in ("warning", "unsupported"):
        return "warning"
    return "success"


class Observer:
    def __init__(self, options: ServerOptions) -> None:
        self.activity = Activity()
        self.table_labels = metrics.TableLabels(options.metrics_tables)
        self.progress_interval = options.progress_interval
        self._ids = itertools.count(1)

    @contextmanager
    def request(self, rpc: str, schema: str, table: str) -> Iterator[RequestWork]:
        """Around one RPC: its log context, its progress (long RPCs), and afterwards its metrics and record. The
        caller sets `work.result` from the answer; an exception leaves it `error`. An RPC without a table
        (ConfigurationForm, Test, Capabilities) passes empty names: its `table` label and record are empty."""
        tabled = bool(schema or table)
        work = RequestWork(rpc, schema, table)
        request_id = next(self._ids)
        metrics.IN_PROGRESS.labels(rpc).inc()
        try:
            with ExitStack() as stack:
                if tabled:
                    stack.enter_context(logs.request_scope(schema, table))
                stack.enter_context(tracked(work))
                if rpc in LONG_RPCS:
                    stack.enter_context(ProgressReporter(work, self.progress_interval,
                                                         lambda p: self.activity.progress(request_id, p)))
                yield work
        finally:
            metrics.IN_PROGRESS.labels(rpc).dec()
            seconds = time.monotonic() - work.started
            label = self.table_labels.label(schema, table) if tabled else ""
            metrics.REQUESTS.labels(rpc, label, work.result).inc()
            metrics.REQUEST_SECONDS.labels(rpc, label).observe(seconds)
            self.activity.request_finished(RequestRecord(time.time(), rpc, label, round(seconds, 3),
                                                         work.rows, work.bytes, work.result))

    def commit_observer(self, root: str) -> Callable[[CommitEvent], None]:
        """For TableStore(observer=…) of one root: a commit's files, attempts and the table's new state."""
        def observe(event: CommitEvent) -> None:
            try:
                metrics.COMMIT_ATTEMPTS.inc(event.attempts)
                metrics.COMMIT_CONFLICTS.inc(event.conflicts)
                if event.committed is None:
                    metrics.COMMITS_GIVEN_UP.inc()
                    return
                label = self.table_labels.label(event.schema, event.table)
                metrics.FILES_WRITTEN.labels(label).inc(len(event.new_files))
                metrics.FILES_REWRITTEN.labels(label).inc(event.rewritten)
                metrics.ROWS_WRITTEN.labels(label).inc(sum(f.rows for f in event.new_files))
                metrics.BYTES_WRITTEN.labels(label).inc(sum(f.bytes for f in event.new_files))
                metrics.TABLE_VERSION.labels(label).set(event.committed.version)
                metrics.TABLE_DATA_FILES.labels(label).set(len(event.committed.files))
                metrics.TABLE_ROWS.labels(label).set(event.committed.rows)
                self.activity.committed(root, event)
            except Exception as exc:  # observing must never fail a commit that stands
                logs.warning(f"metrics: a commit of {event.schema}.{event.table} was not recorded: "
                             f"{type(exc).__name__}")
        return observe

    def batch(self, rpc: str, work: RequestWork, plan: BatchPlan) -> None:
        """A write's batch files: counted by operation, and their totals for its progress lines."""
        work.files, work.bytes = len(plan.files), plan.total_bytes
        for ref in plan.files:
            size = _size(ref.path)  # the server's own disk: files are staged for a cluster only after this
            metrics.BATCH_FILES.labels(ref.kind).inc()
            metrics.BATCH_BYTES.labels(ref.kind).inc(size)

    def written(self, rpc: str, work: RequestWork, table: TableDef, outcome: Outcome) -> None:
        """A write's rows, conversion failures (by column type) and Spark task seconds."""
        work.rows = outcome.data_rows
        metrics.BATCH_ROWS.labels(rpc).inc(outcome.data_rows)
        for (column, _change, _reason), count in outcome.failures_by_column.items():
            metrics.CONVERSION_FAILURES.labels(_column_type(table, column)).inc(count)
        metrics.SPARK_TASK_SECONDS.labels(rpc).inc(outcome.timings.get("task_s", 0.0)
                                                   + outcome.timings.get("decode_task_s", 0.0))

    @staticmethod
    def retried() -> None:
        metrics.RETRIED_REQUESTS.inc()


def _column_type(table: TableDef, column: str) -> str:
    found = table.column(column)
    return found.type if found is not None else "UNKNOWN"


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:  # the decode names a missing file; the metric only lacks its size
        return 0

