"""Prometheus metrics of the server process (docs/reference/metrics.md), in prometheus_client's default registry, which also
holds the library's process metrics (process_resident_memory_bytes, …).

Label cardinality is bounded: `rpc`, `result`, `operation`, `column_type` and `job` take a few fixed values, and
`table` (SCHEMA.TABLE) is kept for the `TableLabels.limit` most recently active tables only. When one more table
becomes active, the least recently active one's series are removed (a table active again starts new series, which
rate() and increase() read as a counter reset), so a destination with 10,000 tables exposes at most `limit` values
of `table` per metric. Totals that must survive that (rows and bytes read, commits) have no `table` label.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

_PREFIX = "records_destination"
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)

REQUESTS = Counter(f"{_PREFIX}_requests", "RPCs answered, by RPC, table and result (success, warning, task, error)",
                   ["rpc", "table", "result"])
REQUEST_SECONDS = Histogram(f"{_PREFIX}_request_seconds", "RPC latency, by RPC and table", ["rpc", "table"],
                            buckets=_SECONDS)
IN_PROGRESS = Gauge(f"{_PREFIX}_requests_in_progress", "RPCs running now", ["rpc"])
BATCH_ROWS = Counter(f"{_PREFIX}_batch_rows", "rows read from batch files, by write RPC", ["rpc"])
BATCH_BYTES = Counter(f"{_PREFIX}_batch_bytes", "bytes of batch files (as sent) by operation (replace, update, "
                      "delete, earliest)", ["operation"])
BATCH_FILES = Counter(f"{_PREFIX}_batch_files", "batch files received, by operation", ["operation"])
CONVERSION_FAILURES = Counter(f"{_PREFIX}_conversion_failures", "values that did not convert to their column type "
                              "(stored as NULL or raw bytes), by column type", ["column_type"])
ROWS_WRITTEN = Counter(f"{_PREFIX}_rows_written", "rows in the data files each version wrote", ["table"])
FILES_WRITTEN = Counter(f"{_PREFIX}_files_written", "data files written", ["table"])
FILES_REWRITTEN = Counter(f"{_PREFIX}_files_rewritten", "data files of the base version replaced (not carried)",
                          ["table"])
BYTES_WRITTEN = Counter(f"{_PREFIX}_bytes_written", "bytes of the data files written", ["table"])
SPARK_JOB_SECONDS = Histogram(f"{_PREFIX}_spark_job_seconds", "Spark jobs' wall time, by kind", ["job"],
                              buckets=_SECONDS)
REQUEST_PHASE_SECONDS = Histogram(f"{_PREFIX}_request_phase_seconds", "a table RPC's seconds in each phase "
                                  "(destination/runtime/phases.py PHASES), by phase", ["phase"],
                                  buckets=(0.001, 0.005, 0.01, 0.025, *_SECONDS))
SPARK_TASK_SECONDS = Counter(f"{_PREFIX}_spark_task_seconds", "Spark tasks' summed seconds, by RPC", ["rpc"])
SPARK_JOBS_FAILED = Counter(f"{_PREFIX}_spark_jobs_failed", "Spark jobs that failed, by kind", ["job"])
COMMIT_ATTEMPTS = Counter(f"{_PREFIX}_commit_attempts", "attempts to commit a version (the first and every retry)")
COMMIT_CONFLICTS = Counter(f"{_PREFIX}_commit_conflicts", "commit attempts that found the version taken by another "
                           "writer (the work is redone on the new base)")
COMMITS_GIVEN_UP = Counter(f"{_PREFIX}_commits_given_up", "writes that gave up after too many commit conflicts")
RETRIED_REQUESTS = Counter(f"{_PREFIX}_retried_requests", "write requests already applied (a retry by Fivetran)")
TABLE_VERSION = Gauge(f"{_PREFIX}_table_version", "latest committed version of a table seen by this server",
                      ["table"])
TABLE_DATA_FILES = Gauge(f"{_PREFIX}_table_data_files", "data files in a table's latest version", ["table"])
TABLE_ROWS = Gauge(f"{_PREFIX}_table_rows", "rows in a table's latest version", ["table"])
SPARK_JVM_MEMORY = Gauge(f"{_PREFIX}_spark_jvm_resident_bytes", "resident memory of the local Spark JVM")

TABLE_METRICS: tuple[MetricWrapperBase, ...] = (REQUESTS, REQUEST_SECONDS, ROWS_WRITTEN, FILES_WRITTEN,
                                                FILES_REWRITTEN, BYTES_WRITTEN, TABLE_VERSION, TABLE_DATA_FILES,
                                                TABLE_ROWS)


class TableLabels:
    """The `table` label's values: the `limit` most recently active tables. A table pushed out of them has its
    series removed from every table-labelled metric."""

    def __init__(self, limit: int, metrics: Iterable[MetricWrapperBase] = TABLE_METRICS) -> None:
        self.limit = limit
        self._metrics = tuple(metrics)
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def label(self, schema: str, table: str) -> str:
        """The label of a table that is active now (it becomes the most recent)."""
        name = f"{schema}.{table}"
        with self._lock:
            if name in self._recent:
                self._recent.move_to_end(name)
                return name
            if len(self._recent) >= self.limit:
                evicted, _ = self._recent.popitem(last=False)
                self._remove_series(evicted)
            self._recent[name] = None
            return name

    def tracked(self) -> list[str]:
        with self._lock:
            return list(self._recent)

    def _remove_series(self, name: str) -> None:
        for metric in self._metrics:
            with metric._lock:  # no public way to list a metric's label sets
                gone = [values for values in metric._metrics if name in _table_value(metric, values)]
            for values in gone:
                try:
                    metric.remove(*values)
                except KeyError:  # removed meanwhile by another thread
                    pass


def _table_value(metric: MetricWrapperBase, values: Sequence[str]) -> tuple[str, ...]:
    names = metric._labelnames
    return (values[names.index("table")],) if "table" in names else ()
