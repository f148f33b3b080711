"""What a table change did, for its RPC's log line and metrics."""
from __future__ import annotations

from dataclasses import dataclass, field

from destination.model.conversion import FailureKey


@dataclass(frozen=True)
class Outcome:
    version: int | None  # None: the table does not exist
    counts: dict[str, int] = field(default_factory=dict)
    rows: int = 0  # operations read from the request's files
    data_rows: int = 0  # of them, the rows of its replace, update and delete files (what the status page shows)
    failures_by_column: dict[FailureKey, int] = field(default_factory=dict)  # values that did not convert
    timings: dict[str, float] = field(default_factory=dict)  # seconds: the Spark job, its tasks summed (and
    # the decode tasks summed, where a path decodes in tasks of their own)

    def timing_text(self) -> str:
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items())


@dataclass(frozen=True)
class BatchRetried:
    """A retried request: its batch was applied before, by `version`; nothing was written."""

    files: int
    version: int
