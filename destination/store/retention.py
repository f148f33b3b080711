"""Retention of a table's versions (step 6 of the commit protocol, destination/store/commit.py), and the commit
records it reads."""
from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from destination.on_disk import layout, records
from destination.on_disk.datafiles import DataFile
from destination.on_disk.locations import held_paths
from destination.on_disk.options import Retention
from destination.storage.base import Storage
from destination.store.claims import Claims
from destination.store.loading import VERSION_METADATA
from destination.store.log_pruning import CommitLogPruning
from destination.store.versions import FaultHook

LISTED_FROM = 4  # on S3, version directories from which one listing of their commit records beats a HEAD each
QUIET_TABLES = 4096  # tables whose next possible retirement this process remembers (the oldest forgotten first)

# retiring a version removes its metadata in this order: `_manifest` first (no reader takes it for a records
# directory any more), `_files.json` last (its list of data files is what retention reads, so a retirement that
# stopped half-way is redone by the next one)
RETIRE_ORDER = (records.MANIFEST, *(m for m in records.METADATA_FILES if m != records.FILES_JSON),
                *records.FORMAT_FILES[1:], records.FILES_JSON)


@dataclass(frozen=True)
class _Quiet:
    """What a retention pass of a table learnt: before `until` no version can retire and no leftover go, so the
    oldest retained version stays `oldest_kept` (for commits up to any version after `latest`)."""
    latest: int
    until: float
    oldest_kept: int


class VersionRetention:
    """Applies a `Retention` policy to a table: retires old versions and deletes uncommitted leftovers (a data file
    goes only when no retained version lists it)."""

    def __init__(self, storage: Storage, retention: Retention, claims: Claims, fault: FaultHook) -> None:
        self.storage = storage
        self.retention = retention
        self._claims = claims
        self._log = CommitLogPruning(storage, fault)
        self._quiet: dict[str, _Quiet] = {}  # per table: nothing can go before a time (see `collect_garbage`)
        self._quiet_lock = threading.Lock()

    def forget(self, prefix: str) -> None:
        """The table was dropped: what was learnt of its versions no longer holds."""
        with self._quiet_lock:
            self._quiet.pop(prefix, None)
        self._log.forget(prefix)

    def collect_garbage(self, prefix: str, latest: int, before_retiring: Callable[[int], bool] | None = None,
                        may_prune: Callable[[], bool] | None = None) -> list[str]:
        """Retire versions older than the newest `keep_versions` once superseded for `min_age_seconds` (oldest
        first, stopping at the first one still too young), and delete uncommitted leftovers (no commit record, no
        live claim) older than that age. A retired version loses its metadata and every data file no retained
        version lists (in the complete layout: its whole directory); files that later versions still list stay
        in its directory. The change directories of committed versions are kept: consumers read them at their own
        pace. `before_retiring(oldest retained version)` runs before any version retires (always, when given);
        False: nothing retires this time. The records of retired versions are then pruned from `_log/` unless
        `may_prune()` says False (the commit's `_latest` was not written: a load starts from an older version, whose
        successors' records must stay). Returns the version directories retired or deleted.

        A pass that finds a committed version too young to retire learns when the first one can go (its successor's
        commit time plus the age; a leftover's newest file time plus the age): until then every version after it is
        younger still, so the next commits of the table skip the listings and pass the same oldest retained version
        (one listing of the table's folder and of its commit records per commit less, on S3 tens of milliseconds)."""
        now = time.time()
        with self._quiet_lock:
            quiet = self._quiet.get(prefix)
        if quiet is not None and quiet.latest <= latest and now < quiet.until:
            if before_retiring is not None:
                before_retiring(quiet.oldest_kept)
            return []
        until = math.inf  # when the first leftover kept for its age may go
        first_due: float | None = None  # ... and the first version kept for its age
        removed: list[str] = []
        retiring: list[int] = []
        too_young = False  # a committed version still kept: the ones after it are kept too
        keep_from = latest - self.retention.keep_versions + 1
        oldest_kept = max(1, keep_from)
        names = self.storage.list_children(prefix)
        candidates = [n for n in map(layout.parse_version_dir, names) if n is not None and n < keep_from]
        committed = self._committed(prefix, candidates)
        for name in names:
            n = layout.parse_version_dir(name)
            if n is None or n >= keep_from:
                continue
            if n not in committed:
                newest = max((o.mtime for o in self.storage.list_recursive(f"{prefix}/{name}")), default=0.0)
                if now - newest >= self.retention.min_age_seconds:
                    self.storage.delete_prefix(layout.changes_dir(prefix, n))  # committed versions keep theirs
                    self.storage.delete_prefix(f"{prefix}/{name}")
                    self._claims.drop(prefix, n)
                    removed.append(name)
                else:
                    until = min(until, newest + self.retention.min_age_seconds)
                continue
            if not too_young:
                if self._retired(prefix, n):
                    continue  # retired before: its directory holds only files that later versions list
                superseded_at = self._committed_at(prefix, n + 1)
                too_young = superseded_at is None or now - superseded_at < self.retention.min_age_seconds
                if too_young and superseded_at is not None:  # unknown (None): nothing is learnt
                    first_due = superseded_at + self.retention.min_age_seconds
            if too_young:
                oldest_kept = min(oldest_kept, n)
            else:
                retiring.append(n)
        if retiring:
            oldest_kept = retiring[-1] + 1
        elif first_due is not None:
            self._remember(prefix, _Quiet(latest=latest, until=min(until, first_due), oldest_kept=oldest_kept))
        if before_retiring is not None and not before_retiring(oldest_kept):
            return removed
        if retiring:
            listed = self._listed_by_retained(prefix, retiring[-1] + 1, latest)
            for n in retiring:
                self._retire(prefix, n, listed)
                removed.append(layout.version_dir_name(n))
            if may_prune is None or may_prune():
                self._log.prune(prefix, oldest_kept)
        return removed

    def _remember(self, prefix: str, quiet: _Quiet) -> None:
        with self._quiet_lock:
            self._quiet.pop(prefix, None)
            self._quiet[prefix] = quiet
            while len(self._quiet) > QUIET_TABLES:
                del self._quiet[next(iter(self._quiet))]

    def _committed(self, prefix: str, candidates: list[int]) -> set[int]:
        """Which of the version directories `candidates` have a commit record (the others are leftovers of writes
        that never committed: every version before the latest has been decided). On S3, from LISTED_FROM
        candidates on, one listing of the records whose numbers share the candidates' leading digits (the versions
        of a retention window: one request, not a HEAD per version younger than `min_age_seconds`); locally, where
        a listing reads the whole log folder, a check of each. A version before the first record `_log/` keeps
        (log_pruning.py) was committed and retired, its record pruned."""
        if not self.storage.spec.is_s3 or len(candidates) < LISTED_FROM:
            found = {n for n in candidates if self.storage.exists(layout.log_path(prefix, n))}
        else:
            paths = [layout.log_path(prefix, n) for n in sorted(candidates)]
            common = os.path.commonprefix([paths[0], paths[-1]])  # noqa: RUF071 (the keys' leading characters)
            listed = set(self.storage.list_starting_with(common))
            found = {n for n, path in zip(sorted(candidates), paths, strict=True) if path in listed}
        if len(found) == len(candidates):
            return found
        first_record = self._log.pruned(prefix).first_record
        return found | {n for n in candidates if n < first_record}

    def _retired(self, prefix: str, n: int) -> bool:
        return not self.storage.exists(f"{layout.version_dir(prefix, n)}/{records.FILES_JSON}")

    def _listed_by_retained(self, prefix: str, first: int, latest: int) -> set[str]:
        """The paths of the data files that versions `first`..`latest` (the retained ones) list outside their own
        directories' versions, i.e. every file a retiring version's directory may still have to keep.

        Version m lists the files of its base (the version it was written on) and new files of its own directory,
        so a file of a version before `first` that a retained version lists is listed by `first` too, unless that
        version's base is older than `first` (a repair from an older version): `_files.json` is read for `first`
        and for those only. A write in progress has the latest version as its base, which is retained."""
        paths: set[str] = set()
        need = True
        for m in range(first, latest + 1):
            base = self.commit_record(prefix, m).get("base")
            if need or not isinstance(base, int) or base < first:
                files = self._version_files(prefix, m)
                need = files is None  # unreadable: its successor lists what it listed (or its own base's)
                directory = layout.version_dir(prefix, m)
                paths.update(path for f in files or () for path in held_paths(directory, f))
        return paths

    def _retire(self, prefix: str, n: int, listed: set[str]) -> None:
        """Delete version n's metadata and the data files it lists or holds that no retained version lists."""
        s = self.storage
        directory = layout.version_dir(prefix, n)
        files = self._version_files(prefix, n) or []
        elsewhere = {path for f in files for path in held_paths(directory, f) if not path.startswith(f"{directory}/")}
        own = [o.path for o in s.list_recursive(directory) if o.path.rsplit("/", 1)[-1] not in VERSION_METADATA]
        kept = [path for path in own if path in listed]
        s.delete(f"{directory}/{records.MANIFEST}")
        emptied: set[str] = set()
        for path in sorted(elsewhere - listed):
            s.delete(path)
            emptied.add(path.rsplit("/", 1)[0])
        # data files first, `_files.json` last: a retirement cut short is found again (and finished) next time
        for path in own:
            if path not in listed:
                s.delete(path)
        for name in RETIRE_ORDER:
            s.delete(f"{directory}/{name}")
        if not kept:
            s.delete_prefix(directory)  # the folder itself, and anything not a data or metadata file
        for folder in emptied:  # a retired directory whose last listed file went
            if not s.exists(f"{folder}/{records.FILES_JSON}") and not s.list_children(folder):
                s.delete_prefix(folder)
        self._claims.drop(prefix, n)

    def _version_files(self, prefix: str, n: int) -> list[DataFile] | None:
        try:
            listing = json.loads(self.storage.read_bytes(f"{layout.version_dir(prefix, n)}/{records.FILES_JSON}"))
        except (FileNotFoundError, ValueError):
            return None
        return [DataFile.from_json(f) for f in listing["files"]]

    def commit_record(self, prefix: str, n: int) -> dict[str, Any]:
        try:
            record = json.loads(self.storage.read_bytes(layout.log_path(prefix, n)))
        except (FileNotFoundError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def _committed_at(self, prefix: str, n: int) -> float | None:
        at = self.commit_record(prefix, n).get("committed_at")
        return float(at) if isinstance(at, int | float) else None
