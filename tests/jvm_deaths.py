"""A Spark driver of its own whose JVM a test kills: `python -m tests.jvm_deaths SCENARIO` (the test session's shared
SparkSession must keep its JVM). It prints one JSON object: how the job on the dying session ended (`job`) and what
a job on the session `get_session` gives next returned (`next`).

Scenarios, each a moment a Spark JVM can die at relative to a request's job and the health check's restart:
- `unnoticed`: the JVM died while idle and nothing noticed; a request submits a job on the session it took before.
- `replaced`: the JVM died and the health check already started a new session; a request submits a job on the old
  one (it took the session just before the JVM died).
- `replaced-in-flight`: the JVM dies while the job runs, and the health check replaces the session before the job's
  thread handles the failure (it holds the session lock from before the kill until the new session runs).
- `restart-fails`: the JVM died while idle and the new JVM exits before it starts (spark-submit refuses its
  arguments); `restart` says how the request that tried to start it ended. The next start succeeds.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from destination.model.table_model import ColumnDef, TableDef
from destination.process import spark_session as session
from destination.storage.base import StorageSpec
from destination.write.runner import run_units
from spark_jobs.contracts import JobContext
from tests.serverproc import running_python_workers

MASTER = "local[2]"
SCENARIOS = ("unnoticed", "replaced", "replaced-in-flight", "restart-fails")
WAIT_SECONDS = 120.0


def sleeps(ctx: JobContext, unit: int) -> int:
    time.sleep(WAIT_SECONDS)
    return unit


def doubles(ctx: JobContext, unit: int) -> int:
    return 2 * unit


def _context() -> JobContext:
    return JobContext(storage=StorageSpec(root=str(Path.cwd())), base_dir=None, target_dir="t",
                      table=TableDef("t", (ColumnDef("id", "INT", True),)), version=1)


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}")
        time.sleep(0.02)


def _kill_jvm() -> None:
    """SIGKILL the session's JVM and wait until it has exited."""
    pid = session.jvm_pid()
    assert pid is not None, "no Spark JVM"
    os.kill(pid, signal.SIGKILL)
    _until(lambda: session.jvm_pid() is None, "the JVM exit")


def _outcome(run: Any) -> str:
    try:
        return f"ok: {run()}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _job_on(spark: SparkSession, task: Any, units: list[int]) -> str:
    return _outcome(lambda: run_units(spark, task, _context(), units, "jvm-deaths job"))


def _in_flight(spark: SparkSession) -> str:
    """A job that is running when the JVM dies, and a restart that wins the race to the session."""
    outcome: dict[str, str] = {}
    caller = threading.Thread(target=lambda: outcome.update(job=_job_on(spark, sleeps, [0, 1])))
    jvm = session.jvm_pid()
    assert jvm is not None
    caller.start()
    _until(lambda: running_python_workers(jvm), "the job's tasks running")
    with session._lock:  # what the health check holds while it replaces a dead session
        _kill_jvm()
        time.sleep(1.0)  # the job's thread sees the failure meanwhile and waits for the lock
        session.get_session(MASTER)
    caller.join(WAIT_SECONDS)
    return outcome.get("job", "no answer")


def run(scenario: str) -> dict[str, str]:
    old = session.get_session(MASTER)
    if scenario == "replaced-in-flight":
        job = _in_flight(old)
    else:
        _kill_jvm()
        if scenario == "replaced":
            session.get_session(MASTER)
        job = _job_on(old, doubles, [0, 1, 2])
    restart = {}
    if scenario == "restart-fails":
        before = os.environ.get("PYSPARK_SUBMIT_ARGS")
        os.environ["PYSPARK_SUBMIT_ARGS"] = "--no-such-option pyspark-shell"
        restart["restart"] = _outcome(lambda: session.get_session(MASTER))
        os.environ.pop("PYSPARK_SUBMIT_ARGS")
        if before is not None:
            os.environ["PYSPARK_SUBMIT_ARGS"] = before
    return {"job": job, **restart, "next": _job_on(session.get_session(MASTER), doubles, [0, 1, 2])}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1])))
