"""The server's one long-lived SparkSession, with the settings the platform notes found necessary."""
from __future__ import annotations

import os
import sys
import threading

from pyspark.sql import SparkSession

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
    # rows cross the JVM only as byte arrays (task units, shuffled chunks, results): a small heap bounds the
    # server's memory; local mode runs every executor in this JVM
    "spark.driver.memory": os.environ.get("RECORDS_DESTINATION_DRIVER_MEMORY", "1g"),
}


def _event_log() -> dict[str, str]:
    """With RECORDS_DESTINATION_SPARK_EVENT_LOG=<dir>, Spark writes its event log there (stage and task metrics
    for profiling: Spark's history server, or bench/eventlog.py, reads it)."""
    directory = os.environ.get("RECORDS_DESTINATION_SPARK_EVENT_LOG")
    if not directory:
        return {}
    os.makedirs(directory, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
            "spark.eventLog.dir": f"file://{os.path.abspath(directory)}"}


def get_session(master: str = "local[*]") -> SparkSession:
    """Create (once) and return the session; later calls return the same one."""
    global _session
    with _lock:
        if _session is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            builder = SparkSession.builder.appName("records-destination").master(master)
            for key, value in {**SETTINGS, **_event_log()}.items():
                builder = builder.config(key, value)
            _session = builder.getOrCreate()
            _session.sparkContext.setLogLevel("ERROR")
        return _session


def stop_session() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None


def trivial_job(session: SparkSession) -> int:
    """The `spark` configuration test: a tiny job that must come back with 4950."""
    return int(session.sparkContext.parallelize(range(100), 2).sum())
