"""Pruning `_log/` as Delta Lake prunes its log: the commit records of retired versions go, so that a table's folder
holds a bounded number of entries whatever its age (step 6 of the commit protocol, after retention).

What stays: the records of every retained version and of the ones after it (retention reads their commit times and
bases, the table formats their operations, `validate` their change directories), the claims, and `_log/_pruned.json`,
a summary written before any record goes: `{"first_record": F, "deleting_from": D}` says that every version before F
was committed and then retired, and that records from D up to F may still be there (a pruning cut short). Retention
takes a version directory below F that has no record (the referencing layout keeps a retired directory for the files
later versions list) for a committed one, never for a leftover; `validate` expects no record before F.

A pruning, each step safe to stop after (the next pruning, of this process or another, starts again from the
summary's D; deleting a record already gone is no error):
1. write the summary naming the new F and the D of the last pruning known to be complete;
2. delete the records from D up to F, oldest first.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from destination.on_disk import layout, records
from destination.runtime import logs
from destination.storage.base import Storage
from destination.store.versions import FaultHook

KNOWN_SUMMARIES = 4096  # tables whose summary this process keeps (the least recently used forgotten first)
# the named steps of a pruning where tests inject a crash (`TableStore(fault=…)`, RECORDS_DESTINATION_EXIT_AT)
PRUNING_STEPS = ("before_log_summary", "after_log_summary", "during_log_pruning", "after_log_pruning")


@dataclass(frozen=True)
class PrunedLog:
    """A table's `_log/_pruned.json`: versions before `first_record` were committed and retired, and their records
    from `deleting_from` on may still be there."""

    first_record: int = 1
    deleting_from: int = 1


class CommitLogPruning:
    """Deletes the commit records of retired versions, after writing the summary that stands for them."""

    def __init__(self, storage: Storage, fault: FaultHook) -> None:
        self.storage = storage
        self._fault = fault
        self._known: OrderedDict[str, PrunedLog] = OrderedDict()  # prefix → its summary, as last read or written
        self._lock = threading.Lock()

    def pruned(self, prefix: str) -> PrunedLog:
        """The table's summary: the one this process last read or wrote, else read (none: nothing pruned)."""
        with self._lock:
            known = self._known.get(prefix)
        return known if known is not None else self._read(prefix)

    def prune(self, prefix: str, first_kept: int) -> None:
        """Delete the records of the versions before `first_kept` (the oldest version retention keeps, every version
        before it retired)."""
        before = self.pruned(prefix)
        if first_kept < before.first_record:  # a summary ahead of the table: dropped and made again elsewhere
            before = self._read(prefix)
        if first_kept <= before.first_record:
            return
        self._fault("before_log_summary")
        self.storage.write_bytes(layout.pruned_log_path(prefix), records.dumps(
            {"first_record": first_kept, "deleting_from": before.deleting_from}))
        self._remember(prefix, PrunedLog(first_kept, before.deleting_from))
        self._fault("after_log_summary")
        for n in range(before.deleting_from, first_kept):
            self.storage.delete(layout.log_path(prefix, n))
            if n == before.deleting_from:
                self._fault("during_log_pruning")
        self._remember(prefix, PrunedLog(first_kept, first_kept))  # the next summary says so
        self._fault("after_log_pruning")

    def forget(self, prefix: str) -> None:
        """The table was dropped: its summary is gone with it."""
        with self._lock:
            self._known.pop(prefix, None)

    def _read(self, prefix: str) -> PrunedLog:
        summary = read_pruned(self.storage, prefix)
        self._remember(prefix, summary)
        return summary

    def _remember(self, prefix: str, summary: PrunedLog) -> None:
        with self._lock:
            self._known.pop(prefix, None)
            self._known[prefix] = summary
            while len(self._known) > KNOWN_SUMMARIES:
                self._known.popitem(last=False)


def read_pruned(storage: Storage, prefix: str) -> PrunedLog:
    """The table's `_log/_pruned.json` (none: nothing pruned)."""
    path = layout.pruned_log_path(prefix)
    try:
        body = json.loads(storage.read_bytes(path))
        return PrunedLog(int(body["first_record"]), int(body["deleting_from"]))
    except FileNotFoundError:
        return PrunedLog()
    except (ValueError, KeyError, TypeError) as exc:  # written whole (one put), so only by hand: start over
        logs.warning(f"{path}: unreadable summary of the pruned commit records ({exc}); taking none as pruned")
        return PrunedLog()
