"""What a catalog does for the destination (the `Catalog` protocol), how its faults are answered, and the rule
mapping Fivetran names to catalog names.

Faults, as the S3 backend answers them: a transient one (the catalog unreachable, a connection reset, a lock
timeout, throttling) is retried with a bounded backoff and then raised as `CatalogUnavailable` (a write answers gRPC
UNAVAILABLE: Fivetran retries the request; a read answers from storage without the catalog); wrong credentials or
missing permissions are `CatalogRefused` (a Task naming the catalog). Neither ever undoes a records commit: the
entry is caught up later (publish.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from destination.model.table_model import TableDef
from destination.runtime.errors import CatalogUnreachable, UserActionRequired, scrub

T = TypeVar("T")
ATTEMPTS = 4
FIRST_BACKOFF_SECONDS = 0.25  # then doubled: 0.25 + 0.5 + 1 s between four attempts


class CatalogUnavailable(CatalogUnreachable):
    """The catalog stayed unreachable (or busy) through every retry."""


class CatalogRefused(UserActionRequired):
    """The catalog refused the destination's credentials or request (permissions, a missing database)."""


class ForeignEntry(UserActionRequired):
    """The catalog holds an entry of the table's name that the destination did not make (no mark, or naming files
    outside the table's folder): it is never moved, overwritten or deleted."""


MARK_PROPERTY = "records-destination.table-folder"  # on every entry made where the catalog holds table properties


def foreign_entry(described: str, entry: str, holder: str) -> ForeignEntry:
    """The Task for an entry the destination did not make: what it is (`holder`: its location or kind) and that it
    stays as it is."""
    return ForeignEntry(f"the {described} holds a table {entry} that this destination did not make ({holder}); it "
                        "is left as it is: drop or rename it, or choose another catalog or schema, for the "
                        "destination to register its table there")


class Catalog(Protocol):
    """One catalog's entries. `namespace` and `name` are catalog names (`catalog_name` below)."""

    described: str  # "sql catalog 'fivetran' (postgresql://…@host/db)": what messages name, no credentials
    names_our_files: bool  # the entry names the destination's metadata file (False: the catalog writes its own)

    def location(self, namespace: str, name: str) -> str | None:
        """The metadata file the table's entry names; None: no entry."""

    def register(self, namespace: str, name: str, location: str, table: TableDef) -> None:
        """Create the entry (and its namespace when missing) naming `location`."""

    def advance(self, namespace: str, name: str, location: str, previous: str, table: TableDef) -> bool:
        """Move the entry from `previous` to `location` (the previous one kept as the catalog keeps it), only if it
        still names `previous`; False: it did not (another writer moved it)."""

    def drop(self, namespace: str, name: str) -> None:
        """Remove the entry, if there is one (the table's files are not touched)."""

    def close(self) -> None:
        """Release what was opened (connections, sessions); a later call opens them again."""


class DeltaEntries(Protocol):
    """A catalog that also registers a table's Delta Lake table (Glue). The entry names the folder, not a version,
    so it is made once and dropped with the table."""

    def register_delta(self, namespace: str, name: str, folder: str) -> None:
        """Create the Delta entry unless it exists (a name held by another kind of table is a Task)."""

    def drop_delta(self, namespace: str, name: str, folder: str) -> None:
        """Remove the Delta entry, if there is one and it is ours (marked with `folder`)."""


def with_retries(described: str, classify: Callable[[Exception], str | None], action: Callable[[], T],
                 hidden: tuple[str, ...] = ()) -> T:
    """`action()`, retried while `classify(error)` says "transient"; "refused" → CatalogRefused; None → raised as
    it is. A message never carries a credential: the catalog is named by `described`, and each of `hidden` (the
    secrets a library's message may quote, e.g. from a URL) is shown as `***`."""
    delay = FIRST_BACKOFF_SECONDS
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return action()
        except Exception as exc:
            kind = classify(exc)
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            for secret in hidden:
                first_line = first_line.replace(secret, "***")
            first_line = scrub(first_line)[:300]
            if kind == "refused":
                raise CatalogRefused(f"the {described} refused the request ({type(exc).__name__}: {first_line}); "
                                     "check the catalog's credentials and permissions") from exc
            if kind != "transient":
                raise
            if attempt == ATTEMPTS:
                raise CatalogUnavailable(f"the {described} is unreachable after {ATTEMPTS} attempts "
                                         f"({type(exc).__name__}: {first_line})") from exc
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def catalog_name(name: str, keeps: Callable[[str], bool], what: str) -> str:
    """A Fivetran schema or table name as the catalog holds it: a character the catalog can hold as it is
    (`keeps`) stays, any other character, and `~` itself, becomes `~XX` per UTF-8 byte (upper-case hex), the
    escape of destination/on_disk/naming.py, so `decode_name` gives the Fivetran name back. A name of more
    than 255 characters after the mapping is refused (a Task)."""
    out: list[str] = []
    for ch in name:
        if ch != "~" and keeps(ch):
            out.append(ch)
        else:
            out.extend(f"~{b:02X}" for b in ch.encode("utf-8"))
    mapped = "".join(out)
    if len(mapped) > 255:
        raise UserActionRequired(f"{what} {name[:60]!r}… is {len(mapped)} characters in the catalog (at most 255)")
    return mapped
