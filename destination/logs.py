"""Fivetran's log format: one JSON object per line on stdout.

Levels are INFO, WARNING and SEVERE only; `message-origin` is `sdk_destination`.
Messages must never carry keys, credentials or row values: callers pass names,
counts and timings only.
"""
from __future__ import annotations

import json
import logging
import sys
import threading

ORIGIN = "sdk_destination"
_LEVELS = {logging.DEBUG: "INFO", logging.INFO: "INFO", logging.WARNING: "WARNING",
           logging.ERROR: "SEVERE", logging.CRITICAL: "SEVERE"}
_lock = threading.Lock()


def _emit(level: str, message: str) -> None:
    line = json.dumps({"level": level, "message": message, "message-origin": ORIGIN}, ensure_ascii=False)
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def info(message: str) -> None:
    _emit("INFO", message)


def warning(message: str) -> None:
    _emit("WARNING", message)


def severe(message: str) -> None:
    _emit("SEVERE", message)


class FivetranJsonHandler(logging.Handler):
    """Routes third-party `logging` records (grpc, py4j, boto) into the same JSON lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _emit(_LEVELS.get(record.levelno, "INFO"), f"[{record.name}] {record.getMessage()}")
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)


def configure_library_logging() -> None:
    """Send library loggers through our handler at WARNING and above (py4j is noisy at INFO)."""
    root = logging.getLogger()
    root.handlers[:] = [FivetranJsonHandler()]
    root.setLevel(logging.WARNING)
