"""Fivetran's log format: one JSON object per line on stdout.

Levels are INFO, WARNING and SEVERE only; `message-origin` is `sdk_destination`.
Messages must never carry keys, credentials or row values: callers pass names,
counts and timings only.

Context: `account_name` and `group_name` (Fivetran's FIVETRAN_ACCOUNT_NAME and FIVETRAN_GROUP_NAME, given once by
`serve`) are on every line when set; `schema` and `table` on every line logged while a request for a table runs
(`request_scope`, a context variable: the request's own thread, not threads it starts).
"""
from __future__ import annotations

import contextvars
import json
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ORIGIN = "sdk_destination"
_LEVELS = {logging.DEBUG: "INFO", logging.INFO: "INFO", logging.WARNING: "WARNING",
           logging.ERROR: "SEVERE", logging.CRITICAL: "SEVERE"}
_lock = threading.Lock()
_process_context: dict[str, str] = {}
_request_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("request_context",
                                                                                         default=None)


def set_process_context(*, account_name: str = "", group_name: str = "") -> None:
    """The Fivetran account and group this destination serves (empty: not set, left out of the lines)."""
    _process_context.clear()
    _process_context.update({k: v for k, v in (("account_name", account_name), ("group_name", group_name)) if v})


@contextmanager
def request_scope(schema: str, table: str) -> Iterator[None]:
    """Lines logged in this block (on this thread) carry the request's schema and table."""
    token = _request_context.set({"schema": schema, "table": table})
    try:
        yield
    finally:
        _request_context.reset(token)


def _emit(level: str, message: str, fields: dict[str, Any] | None = None) -> None:
    record = {"level": level, "message": message, "message-origin": ORIGIN, **_process_context,
              **(_request_context.get() or {}), **(fields or {})}
    line = json.dumps(record, ensure_ascii=False)
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def info(message: str, fields: dict[str, Any] | None = None) -> None:
    """`fields`: more JSON fields of the line (names, counts and timings only, as the message)."""
    _emit("INFO", message, fields)


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
