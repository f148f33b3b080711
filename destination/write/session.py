"""The server's one long-lived SparkSession (driver side), with the settings the platform notes found necessary."""
from __future__ import annotations

import os
import sys
import threading

from pyspark.sql import SparkSession

from destination.settings import DRIVER_MEMORY

_lock = threading.Lock()
_session: SparkSession | None = None

SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96, which garbles years 1 and 9999
    "spark.sql.timeType.enabled": "true",  # NAIVE_TIME as TIME(MICROS)
    "spark.sql.timestampType": "TIMESTAMP_NTZ",  # naive Arrow timestamps stay naive
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # shuffled payloads are Arrow IPC chunks of decoded rows; compressing them cost more time than it saved
    "spark.shuffle.compress": "false",
}


def _event_log(directory: str | None) -> dict[str, str]:
    """With an event-log directory, Spark writes its event log there (stage and task metrics for profiling: Spark's
    history server, or bench/eventlog.py, reads it)."""
    if not directory:
        return {}
    os.makedirs(directory, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
            "spark.eventLog.dir": f"file://{os.path.abspath(directory)}"}


def get_session(master: str = "local[*]", driver_memory: str = DRIVER_MEMORY,
                event_log: str | None = None) -> SparkSession:
    """Create (once) and return the session; later calls return the same one. `driver_memory` is the JVM's heap:
    rows cross it only as byte arrays (task units, shuffled chunks, results), and local mode runs every executor
    in it."""
    global _session
    with _lock:
        if _session is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            builder = SparkSession.builder.appName("records-destination").master(master)
            for key, value in {**SETTINGS, "spark.driver.memory": driver_memory, **_event_log(event_log)}.items():
                builder = builder.config(key, value)
            _session = builder.getOrCreate()
            _session.sparkContext.setLogLevel("ERROR")
        return _session


def trivial_job(session: SparkSession) -> int:
    """The `spark` configuration test: a tiny job that must come back with 4950."""
    return int(session.sparkContext.parallelize(range(100), 2).sum())
