"""The error taxonomy: every failure the destination reports maps to one answer.

- `UserActionRequired` → a Task (the sync stops; the message says what to do).
- `BadBatchFile` / `BadRequest` → gRPC INVALID_ARGUMENT (a malformed request or file).
- `CommitConflict` → retried internally, then a Task.
- `Unavailable` (Spark's JVM died, storage unreachable after the retries, server stopping) → gRPC UNAVAILABLE:
  nothing is wrong with the request or the settings, and Fivetran retries it.
- anything else → gRPC INTERNAL, logged once as SEVERE.
Messages name the table, file and cause; they never contain keys or row values.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def scrub(message: str) -> str:
    """Keep row values out of library messages: drop quoted literals and CSV row echoes."""
    message = re.sub(r"'[^']*'", "'…'", message)
    return re.sub(r"(got \d+(?: columns?)?):[^\n]*", r"\1", message)


def _rebuild(cls: type[DestinationError], args: tuple[object, ...], fields: dict[str, object]) -> DestinationError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error


class DestinationError(Exception):
    """Root of all errors raised on purpose by this destination."""

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its class and fields whatever its __init__ takes: an error raised in a Spark task reaches
        the driver as itself (spark_jobs.boundary)."""
        return _rebuild, (type(self), self.args, self.__dict__)


class UserActionRequired(DestinationError):
    """The user must change something (configuration, credentials, table definition)."""


class Problems:
    """The user's mistakes in one configuration, gathered field by field so that one answer names every bad value
    (the first alone meant one Test per mistake)."""

    def __init__(self) -> None:
        self._found: list[UserActionRequired] = []

    def attempt(self, parse: Callable[[], T]) -> T | None:
        """`parse()`, or None with its UserActionRequired kept for `raise_any`."""
        try:
            return parse()
        except UserActionRequired as exc:
            self._found.append(exc)
            return None

    def add(self, message: str) -> None:
        self._found.append(UserActionRequired(message))

    def raise_any(self) -> None:
        """Raise the one problem found as it was, or one UserActionRequired naming them all."""
        if len(self._found) == 1:
            raise self._found[0]
        if self._found:
            raise UserActionRequired("; ".join(str(exc) for exc in self._found))


class RefusedChange(UserActionRequired):
    """A change that would destroy data (AlterTable): str() is the log text; `task_message` adds one row's key,
    which the user needs to find the row and which is kept out of logs."""

    def __init__(self, message: str, example_key: str) -> None:
        super().__init__(message)
        self.task_message = f"{message}. Example row: key {example_key}"


class StorageError(UserActionRequired):
    """The table store could not be reached or refused an operation."""


class DamagedDataFile(UserActionRequired):
    """A data file of a committed version cannot be read as the rows it was written with (truncated, overwritten,
    or not written by this destination): no request can mend it, so someone must look (a Task naming the file)."""


class BadRequest(DestinationError):
    """The request itself is malformed (unknown type, missing key, bad table definition)."""


class BadBatchFile(BadRequest):
    """A batch file cannot be read: wrong key, bad padding, corrupt or truncated data, bad CSV."""

    def __init__(self, path: str, cause: str) -> None:
        super().__init__(f"batch file {path!r}: {cause}")
        self.path = path
        self.cause = cause


class Unavailable(DestinationError):
    """A transient failure: the same request may succeed when retried (gRPC UNAVAILABLE)."""


class StorageUnavailable(Unavailable):
    """The object store stayed unreachable (or throttling, or failing with 5xx) through every retry."""


class CatalogUnreachable(Unavailable):
    """A catalog stayed unreachable through every retry (destination/catalogs/catalog.py raises it): a write answers
    UNAVAILABLE, a read answers from storage and leaves the entry's catch-up to the next request."""


class SparkUnavailable(Unavailable):
    """Spark's JVM stopped (killed, out of memory) during the job; a new session is started for the next one."""


class WriteAbandoned(Unavailable):
    """The server is stopping and could not finish the write before its grace period ran out; nothing was committed."""


class CommitConflict(DestinationError):
    """Another writer committed the version this write was based on."""


class TableNotFound(UserActionRequired):
    """The table does not exist in the store."""


def cause_text(exc: BaseException, limit: int = 4) -> str:
    """The causes chained to `exc` (`raise … from`), `Type: first line` each and scrubbed, for the log line of the
    error that ended a request."""
    parts: list[str] = []
    cause = exc.__cause__
    while cause is not None and len(parts) < limit:
        lines = str(cause).strip().splitlines()
        parts.append(f"{type(cause).__name__}: {scrub(lines[0]) if lines else ''}"[:400])
        cause = cause.__cause__
    return "; caused by ".join(parts)
