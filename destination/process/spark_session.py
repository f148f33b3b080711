"""The server's one long-lived SparkSession (driver side), with the settings the platform notes found necessary.

The JVM behind it can die (killed, out of memory). `get_session` notices that and starts a new one; PySpark keeps
the dead gateway in class attributes and would reuse it, so `_discard` resets them. A session is only ever replaced
because its JVM died, so a job whose session is no longer the current one ran on a dead JVM (`discard_if_dead`).
"""
from __future__ import annotations

import os
import sys
import threading

from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from destination.runtime.errors import SparkUnavailable
from destination.runtime.settings import DRIVER_MEMORY

_lock = threading.RLock()  # re-entrant: tests/jvm_deaths.py holds it across a restart, as the health check does
_session: SparkSession | None = None
_DIED = "the Spark JVM has stopped (killed or out of memory)"
_died = False  # the last session's JVM died and no new one has started yet
GATEWAY_EXITED = "JAVA_GATEWAY_EXITED"  # PySpark's error when spark-submit exits before handing over its port

SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96, which garbles years 1 and 9999
    "spark.sql.timeType.enabled": "true",  # NAIVE_TIME as TIME(MICROS)
    "spark.sql.timestampType": "TIMESTAMP_NTZ",  # naive Arrow timestamps stay naive
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # a reused Python worker keeps the memory its tasks freed, for the next task: Arrow's allocator (mimalloc) gave it
    # back to the system after each task and the next one faulted it in again, page by page; on this platform's VMs
    # a fault costs 2-25 µs (the host supplies the page again), and a uniform 1 % change of a 10M-row table spent
    # about two fifths of its workers' CPU in the kernel so (docs/design/write-path.md, "The Python workers")
    "spark.executorEnv.MIMALLOC_PURGE_DELAY": os.environ.get("MIMALLOC_PURGE_DELAY", "-1"),  # the operator's, if set
    # shuffled payloads are Arrow IPC chunks of decoded rows; compressing them cost more time than it saved
    "spark.shuffle.compress": "false",
    # a JVM out of heap exits at once instead of limping on: get_session then sees it dead and starts a new one.
    # The driver's JVM schedules jobs and moves byte arrays (rows are Arrow in Python tasks): its own CPU is a small
    # sync's fixed cost, and on a few cores G1's concurrent threads and C2's compilations took CPU the tasks needed
    # (the fleet benchmark's small syncs: about a fifth more calls/s with the serial collector and C1 alone)
    "spark.driver.extraJavaOptions": "-XX:+ExitOnOutOfMemoryError -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def _event_log(directory: str | None) -> dict[str, str]:
    """With an event-log directory, Spark writes its event log there (stage and task metrics for profiling: Spark's
    history server, or bench/eventlog.py, reads it)."""
    if not directory:
        return {}
    os.makedirs(directory, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
            "spark.eventLog.dir": f"file://{os.path.abspath(directory)}"}


def _web_ui(port: int | None) -> dict[str, str]:
    """Spark's own web UI on `port` (serve --spark-ui-port); off without one."""
    if port is None:
        return {}
    return {"spark.ui.enabled": "true", "spark.ui.port": str(port), "spark.port.maxRetries": "0"}


def get_session(master: str = "local[*]", driver_memory: str = DRIVER_MEMORY,
                event_log: str | None = None, ui_port: int | None = None) -> SparkSession:
    """Return the live session: created on the first call, and again when the JVM behind it has died.
    `driver_memory` is the JVM's heap: rows cross it only as byte arrays (task units, shuffled chunks, results),
    and local mode runs every executor in it."""
    global _session, _died
    with _lock:
        if _session is not None and not is_alive(_session):
            _discard(_session)
            _session, _died = None, True
        if _session is None:
            try:
                _session = _start(master, driver_memory, {**_event_log(event_log), **_web_ui(ui_port)})
            except PySparkRuntimeError as exc:
                if exc.getCondition() != GATEWAY_EXITED:
                    raise
                raise SparkUnavailable("the new Spark JVM exited before it started (spark-submit failed; the health "
                                       "check tries again), retry the request") from exc
            _died = False
        return _session


def _start(master: str, driver_memory: str, extra: dict[str, str]) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("records-destination").master(master)
    for key, value in {**SETTINGS, "spark.driver.memory": driver_memory, **extra}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def is_alive(session: SparkSession) -> bool:
    """False when the JVM process has exited, does not answer, or its SparkContext was stopped."""
    context = session.sparkContext
    process = getattr(SparkContext._gateway, "proc", None)
    if process is not None and process.poll() is not None:
        return False
    if getattr(context, "_jsc", None) is None:
        return False
    try:
        return not context._jsc.sc().isStopped()
    except Exception:  # Py4JError or a refused/reset socket: the gateway is gone
        return False


def spark_problem() -> str | None:
    """For health checks: why Spark cannot run a job now, or None when the session is alive."""
    with _lock:
        if _session is None:
            return _DIED if _died else "Spark is not started yet"
        if not is_alive(_session):
            return _DIED
        return None


def discard_if_dead(session: SparkSession) -> bool:
    """After a job on `session` failed: True when its JVM died, and the session is dropped so the next job starts a
    new one. The job's own session is judged, not the current one: the health check (or another request) may have
    dropped it, or started its successor, before the job's thread got here; it was dead then too."""
    global _session, _died
    with _lock:
        if session is not _session:
            return True
        if is_alive(session):
            return False
        _discard(session)
        _session, _died = None, True
        return True


def _discard(session: SparkSession) -> None:
    """Forget a session whose JVM is dead: stop what can be stopped, kill the JVM if it still runs, and reset
    PySpark's class-level gateway and active-session state (a new builder would otherwise reuse the dead gateway)."""
    try:
        session.stop()
    except Exception:  # stopping talks to the dead JVM; only the Python side is left to reset
        pass
    gateway = SparkContext._gateway
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception:  # the socket is already closed
            pass
        process = getattr(gateway, "proc", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
    with SparkContext._lock:
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


def jvm_pid() -> int | None:
    """The process id of the local Spark JVM (None: not started, or a gateway that is not our child)."""
    process = getattr(SparkContext._gateway, "proc", None)
    return process.pid if process is not None and process.poll() is None else None


def trivial_job(session: SparkSession) -> int:
    """The `spark` configuration test: a tiny job that must come back with 4950."""
    return int(session.sparkContext.parallelize(range(100), 2).sum())
