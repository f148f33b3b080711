"""What the server has seen, kept in memory for the status page: the last requests, the tables it committed or
found under its root (latest version, rows, size, last commit, recent versions) and the requests running now.

Page views read only this. The root is listed by `RootLister` in the background, at most once per
`ServerOptions.status_refresh` seconds and loading at most `LOADS_PER_ROUND` tables not seen yet per round, so an S3
root with thousands of tables costs a bounded number of requests whatever the page's traffic.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from destination.process.progress import Progress
from destination.runtime import logs
from destination.runtime.errors import scrub
from destination.store.table_store import TableStore
from destination.store.versions import CommitEvent, TableVersion

RECENT_REQUESTS = 200
VERSIONS_KEPT = 20  # per table
LOADS_PER_ROUND = 100


@dataclass(frozen=True)
class RequestRecord:
    finished_at: float  # epoch seconds
    rpc: str
    table: str  # SCHEMA.TABLE
    seconds: float
    rows: int  # rows of the request's replace, update and delete files (writes; spark_jobs.contracts.data_rows)
    bytes: int  # batch files' bytes as sent (writes)
    result: str  # success | warning | task | error


@dataclass(frozen=True)
class VersionRecord:
    version: int
    committed_at: float
    rows: int
    bytes: int
    files: int
    new_files: int | None = None  # None: found by a listing, not committed by this server


@dataclass
class TableStatus:
    root: str
    schema: str
    table: str
    versions: deque[VersionRecord] = field(default_factory=lambda: deque(maxlen=VERSIONS_KEPT))

    @property
    def latest(self) -> VersionRecord:
        return self.versions[-1]

    def to_json(self) -> dict[str, Any]:
        latest = self.latest
        return {"root": self.root, "schema": self.schema, "table": self.table, "version": latest.version,
                "rows": latest.rows, "bytes": latest.bytes, "files": latest.files,
                "committed_at": latest.committed_at, "versions": [asdict(v) for v in reversed(self.versions)]}


def _version_record(version: TableVersion, new_files: int | None) -> VersionRecord:
    return VersionRecord(version.version, version.committed_at, version.rows, sum(f.bytes for f in version.files),
                         len(version.files), new_files)


class Activity:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: deque[RequestRecord] = deque(maxlen=RECENT_REQUESTS)
        self._tables: dict[tuple[str, str, str], TableStatus] = {}
        self._running: dict[int, Progress] = {}  # by request id
        self.started_at = time.time()
        self.last_listing: float | None = None

    def request_finished(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def committed(self, root: str, event: CommitEvent) -> None:
        if event.committed is None:
            return
        self._add(root, event.schema, event.table, _version_record(event.committed, len(event.new_files)))

    def found(self, root: str, schema: str, table: str, version: TableVersion) -> None:
        """A table's latest version found by a listing (kept only if nothing newer was seen)."""
        self._add(root, schema, table, _version_record(version, None))

    def knows(self, root: str, schema: str, table: str) -> bool:
        with self._lock:
            return (root, schema, table) in self._tables

    def keep_only(self, root: str, listed: set[tuple[str, str]], listed_since: float) -> None:
        """Forget the tables of `root` that a listing begun at `listed_since` did not find (dropped or renamed),
        unless committed since."""
        with self._lock:
            for key in [k for k, t in self._tables.items() if k[0] == root and (k[1], k[2]) not in listed
                        and t.latest.committed_at < listed_since]:
                del self._tables[key]

    def _add(self, root: str, schema: str, table: str, record: VersionRecord) -> None:
        with self._lock:
            status = self._tables.setdefault((root, schema, table), TableStatus(root, schema, table))
            if status.versions and status.latest.version >= record.version:
                return
            status.versions.append(record)

    def progress(self, request: int, progress: Progress | None) -> None:
        with self._lock:
            if progress is None:
                self._running.pop(request, None)
            else:
                self._running[request] = progress

    def running(self) -> list[dict[str, Any]]:
        """The requests running now (what the tester polls: no table is copied for it)."""
        with self._lock:
            return [p.to_json() for p in self._running.values()]

    def table(self, root: str, schema: str, table: str) -> dict[str, Any] | None:
        """One table's versions, looked up directly."""
        with self._lock:
            status = self._tables.get((root, schema, table))
            return status.to_json() if status is not None else None

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows, as JSON-ready values."""
        with self._lock:
            tables = sorted((t.to_json() for t in self._tables.values()), key=lambda t: (t["schema"], t["table"]))
            requests = [asdict(r) for r in reversed(self._requests)]
            running = [p.to_json() for p in self._running.values()]
        return {"started_at": self.started_at, "last_listing": self.last_listing, "tables": tables,
                "requests": requests, "running": running}


class RootLister:
    """Lists the server's root in the background (the first time at start, then every `interval` seconds) and
    loads the latest version of tables not seen yet, at most LOADS_PER_ROUND per round."""

    def __init__(self, store: TableStore, activity: Activity, interval: float) -> None:
        self._store = store
        self._activity = activity
        self._interval = max(1.0, interval)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="status-lister", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def refresh(self) -> int:
        """One round; the number of tables loaded."""
        root = self._store.storage.spec.root
        started = time.time()
        loaded = 0
        listed: set[tuple[str, str]] = set()
        for schema in self._store.list_schemas():
            for table in self._store.list_tables(schema):
                listed.add((schema, table))
                if loaded >= LOADS_PER_ROUND or self._stopped.is_set() or self._activity.knows(root, schema, table):
                    continue
                version = self._store.load(schema, table)
                loaded += 1
                if version is not None:
                    self._activity.found(root, schema, table, version)
        self._activity.keep_only(root, listed, started)
        self._activity.last_listing = time.time()
        return loaded

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self.refresh()
            except Exception as exc:  # an unreachable root: the health check says so; try again next round
                logs.warning(f"status page: listing the root failed: {type(exc).__name__}: {scrub(str(exc))}")
            self._stopped.wait(self._interval)
