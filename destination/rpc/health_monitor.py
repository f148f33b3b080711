"""Health that means something: a background check keeps the gRPC health status true.

NOT_SERVING while Spark is not running (the check starts a new session when the JVM died) or while the server's
root (`serve --root`) cannot be written; SERVING again once both are fixed. One log line each time the status or
its reason changes, never one per check.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from grpc_health.v1 import health, health_pb2

from destination.process.spark_session import spark_problem
from destination.runtime import logs
from destination.runtime.errors import DestinationError, scrub
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage

INTERVAL_SECONDS = 5.0
MIN_INTERVAL_SECONDS = 0.1
MAX_INTERVAL_SECONDS = 60.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_STARTING = "the server is starting"
_STOPPING = "the server is stopping"


def check_interval(seconds: float = INTERVAL_SECONDS) -> float:
    """Seconds between checks (ServerOptions.health_interval, RECORDS_DESTINATION_HEALTH_INTERVAL), kept within
    [0.1, 60]."""
    return min(MAX_INTERVAL_SECONDS, max(MIN_INTERVAL_SECONDS, seconds))


@dataclass(frozen=True)
class Check:
    """`problem` says why the server cannot work now (None: fine); `repair` is tried while there is one."""

    problem: Callable[[], str | None]
    repair: Callable[[], object] | None = None


def spark_check(start: Callable[[], object]) -> Check:
    """Spark must have a live session; `start` creates one (the first, or a new one after the JVM died)."""
    return Check(spark_problem, start)


def root_check(spec: StorageSpec) -> Check:
    """The server's root must take a write: a probe object is written and deleted."""
    def problem() -> str | None:
        probe = f".health-probe-{uuid.uuid4().hex}"
        try:
            storage = open_storage(spec)
            storage.write_bytes(probe, b"")
            storage.delete(probe)
        except DestinationError as exc:  # the store's own message names the root and the cause
            return str(exc)
        except Exception as exc:  # any failure means writes would fail too; the log line names it
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
            kind = "root" if spec.is_s3 else "root directory"
            return f"the {kind} {spec.root!r} is not writable: {scrub(cause)}"
        return None
    return Check(problem)


class HealthMonitor:
    """Runs `checks` every `interval` seconds in a daemon thread and publishes the result under `names`."""

    def __init__(self, servicer: health.HealthServicer, names: Sequence[str], checks: Sequence[Check],
                 interval: float) -> None:
        self._servicer = servicer
        self._names = tuple(names)
        self._checks = tuple(checks)
        self._interval = interval
        self._stopped = threading.Event()
        self._publishing = threading.Lock()
        self._reason: str | None = _STARTING  # what was last published; None: SERVING
        self._thread = threading.Thread(target=self._loop, name="health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No more checks; NOT_SERVING from now on (the server is stopping)."""
        self._stopped.set()
        self._publish(_STOPPING)

    def update(self) -> bool:
        """Check once and publish; try to repair what is wrong. True when a repair ran (check again at once)."""
        failing = [(check, reason) for check in self._checks if (reason := check.problem()) is not None]
        # at start only problems a check repairs itself (Spark not started yet) are expected; any other (a root
        # that cannot be written) is a WARNING from the first check on, so a user at a terminal sees it at once
        self._publish("; ".join(reason for _check, reason in failing) or None,
                      repairable=all(check.repair is not None for check, _reason in failing))
        repaired = False
        for check, reason in failing:
            if check.repair is None or self._stopped.is_set():
                continue
            try:
                check.repair()
                repaired = True
            except Exception as exc:  # stays NOT_SERVING; the next round tries again
                self._publish(f"{reason}; recovery failed: {type(exc).__name__}: {scrub(str(exc))}")
        return repaired

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                repaired = self.update()
            except Exception as exc:  # a check itself broke: report it rather than a stale SERVING
                self._publish(f"health check failed: {type(exc).__name__}: {scrub(str(exc))}", repairable=False)
                repaired = False
            if not repaired:
                self._stopped.wait(self._interval)

    def _publish(self, reason: str | None, repairable: bool = True) -> None:
        """Set the status; log a change of reason: INFO when expected (starting with problems the checks repair,
        stopping), else WARNING."""
        with self._publishing:
            if self._stopped.is_set() and reason is None:
                return
            for name in self._names:
                self._servicer.set(name, SERVING if reason is None else NOT_SERVING)
            if reason != self._reason:
                if reason is None:
                    logs.info("health: SERVING")
                elif (self._reason is _STARTING and repairable) or reason is _STOPPING:  # expected: no warning
                    logs.info(f"health: NOT_SERVING: {reason}")
                else:
                    logs.warning(f"health: NOT_SERVING: {reason}")
                self._reason = reason
