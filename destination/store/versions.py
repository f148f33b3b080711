"""What the table store reads and writes: committed versions, the version a writer prepares, the hooks a store is
given, and why a write does not commit."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from destination.changes.metadata import ChangeParts, ChangeSet
from destination.model.table_model import TableDef
from destination.on_disk import layout
from destination.on_disk.datafiles import DataFile
from destination.runtime.errors import CommitConflict, StorageError
from destination.storage.base import Storage, StorageSpec

if TYPE_CHECKING:
    from destination.store.table_store import TableStore

FaultHook = Callable[[str], None]
SHOWN_MISSING = 3  # missing files named in a message


class ClaimRefused(Enum):
    """Why a writer holds no claim on the version it tried."""

    COMMITTED = "the version is committed"
    BUSY = "a live writer holds the claim"


class LostClaim(CommitConflict):
    """The version this writer prepared cannot be committed by it (its claim was taken over, or files it wrote
    are gone); nothing was committed and the write is redone."""


class IncompleteVersion(StorageError):
    """A committed version lacks files its metadata lists: reads fall back, writes need `repair` first."""

    def __init__(self, storage: Storage, schema: str, table: str, version: int, missing: list[str]) -> None:
        shown = ", ".join(missing[:SHOWN_MISSING]) + (" …" if len(missing) > SHOWN_MISSING else "")
        super().__init__(
            f"version {version} of {schema}.{table} is committed but {len(missing)} of its files are missing "
            f"({shown}). Run `records-destination repair {schema}.{table} --root {storage.spec.root}` to commit the "
            f"newest complete version again as the latest, then re-sync the table (the rows of the incomplete "
            f"versions are not in it)")
        self.version = version
        self.missing = missing


@dataclass(frozen=True)
class Repair:
    """What `TableStore.repair` did: the incomplete versions, the version restored, and the version committed."""

    incomplete: tuple[int, ...]
    restored: int
    version: int


class Publisher(Protocol):
    """Brings a table's other formats (Delta Lake, Iceberg: destination/table_formats/sync.py) up to the version
    just committed, telling them the oldest version retention keeps. False: a format could not follow (logged);
    retention then waits, since a format's latest entry may still reference the files it would delete."""

    def __call__(self, store: TableStore, prefix: str, committed: TableVersion, oldest_retained: int) -> bool: ...

    def dropped(self, store: TableStore, schema: str, table: str) -> None:
        """The table is about to be dropped (its catalog entry goes first: destination/catalogs/publish.py)."""


class RequestIdentity(Protocol):
    """A write request's identity, recorded with the version it commits so that its retry is recognised
    (destination/write/batches.py's BatchIdentity)."""

    def seen_in(self, recent: Sequence[str]) -> bool:
        """Whether one of the identities recorded by the latest versions is this request's."""
        ...

    @property
    def value(self) -> str:
        """What the version records."""
        ...


class Copies(Protocol):
    """Copies (source, target) pairs of storage paths (in the storage of `spec`) for the version being written
    (`table`, `directory`, `version`); the write layer passes one that fans them out over Spark's executors
    (destination/write/copy_job.py)."""

    def __call__(self, spec: StorageSpec, table: TableDef, directory: str, version: int,
                 pairs: Sequence[tuple[str, str]]) -> None: ...


@dataclass(frozen=True)
class TableVersion:
    """One committed version: its definition and its data files."""

    schema: str
    version: int
    table: TableDef
    files: tuple[DataFile, ...]
    prefix: str
    committed_at: float = 0.0
    recent_batches: tuple[str, ...] = ()
    change_totals: dict[str, int] = field(default_factory=dict)  # running operation totals of the change files

    @property
    def directory(self) -> str:
        return layout.version_dir(self.prefix, self.version)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass(frozen=True)
class VersionTarget:
    """The version a writer prepares: where its files go and its timestamp (also its changes' commit time)."""

    version: int
    directory: str  # v<N>/
    changes_directory: str  # changes/v<N>/
    timestamp: float  # seconds since the epoch; recorded as the version's committed_at


@dataclass
class PendingVersion:
    """What a writer produced for version N+1, before commit."""

    table: TableDef
    new_files: list[DataFile]
    carried: list[DataFile]
    operation: dict[str, Any]
    # with change files on: what the tasks wrote into the change directory (None: nothing yet, the writer
    # snapshots the version's files), and the completed directory (written by the store before the commit record)
    change_parts: ChangeParts | None = None
    changes: ChangeSet | None = None


@dataclass(frozen=True)
class CommitEvent:
    """What one write of a table did, for metrics and the status page (`TableStore(observer=…)`)."""

    schema: str
    table: str
    committed: TableVersion | None  # None: gave up after commit conflicts
    new_files: tuple[DataFile, ...] = ()  # written for this version (its files not carried from the base)
    rewritten: int = 0  # base files replaced (not carried)
    attempts: int = 1
    conflicts: int = 0


@dataclass
class Attempt:
    """One try at a table's next version, in the spirit of a transaction: the version `target` claimed (claim
    generation `claim`) on `base`, the latest committed version (None: a new table). The writer fills
    target.directory, then commits a PendingVersion or abandons the attempt (TableStore.begin/commit/abandon)."""

    schema: str
    table: str
    prefix: str
    base: TableVersion | None
    target: VersionTarget
    claim: int
    conflicts: list[CommitConflict]  # of the tries before it, for this write: retries stop at MAX_ATTEMPTS
    deadline: float  # time.monotonic() after which a claim held by another live writer is no longer waited for
