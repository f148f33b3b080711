"""The `sql` catalog: Iceberg's JDBC catalog tables (`iceberg_tables`, `iceberg_namespace_properties`, as Iceberg's
Java JdbcCatalog and pyiceberg's SqlCatalog define them) in a database given by a SQLAlchemy URL: SQLite on one
machine, PostgreSQL for a team. Spark's, Trino's and Flink's JDBC catalogs and pyiceberg's SqlCatalog read the same
rows: (catalog_name, table_namespace, table_name) → metadata_location, previous_metadata_location.

pyiceberg's SqlCatalog creates the tables, the namespaces and the entries (`register_table`). Moving an entry to
the next metadata file is not its `commit_table`: that writes a metadata file of its own from a list of updates,
while ours is already written (destination/table_formats/iceberg.py, the commit point of the Iceberg version). So
the move is the JDBC catalog's own compare-and-swap, run on the SqlCatalog's engine: UPDATE … SET
metadata_location = new, previous_metadata_location = old WHERE … AND metadata_location = old (one row updated:
moved; none: another writer moved it first).
"""
from __future__ import annotations

from typing import Any

from destination.catalogs.catalog import with_retries
from destination.model.table_model import TableDef

TRANSIENT_SQLSTATES = ("08", "40", "53", "57P")  # connection, rollback/deadlock, resources, operator intervention
REFUSED_SQLSTATES = ("28", "42501", "3D")  # authorization, insufficient privilege, no such database
_REFUSED_TEXTS = ("password authentication failed", "permission denied", "no pg_hba.conf entry", "role ",
                  "does not exist", "unable to open database", "readonly database")


def _described(name: str, uri: str) -> str:
    """The catalog as messages name it: the URL without its password."""
    from sqlalchemy.engine import make_url

    try:
        shown = make_url(uri).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: named by its scheme only
        shown = uri.split(":", 1)[0] + ":…"
    return f"sql catalog {name!r} ({shown})"


def classify(exc: Exception) -> str | None:
    """transient, refused or None (an error of ours, raised as it is), from the driver's SQLSTATE where it has one
    (psycopg), else from SQLAlchemy's class and SQLite's message."""
    from sqlalchemy import exc as sa

    if isinstance(exc, sa.TimeoutError):  # no pooled connection came free in time
        return "transient"
    if not isinstance(exc, sa.DBAPIError):
        return None
    if exc.connection_invalidated:
        return "transient"
    state = str(getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None) or "")
    if state.startswith(REFUSED_SQLSTATES):
        return "refused"
    if state.startswith(TRANSIENT_SQLSTATES):
        return "transient"
    text = str(exc.orig).lower()
    if any(refused in text for refused in _REFUSED_TEXTS):  # a failed connection carries no SQLSTATE
        return "refused"
    if "database is locked" in text or "connection" in text or "server closed" in text or "timeout" in text:
        return "transient"
    return "transient" if isinstance(exc, sa.OperationalError | sa.InterfaceError) else None


class SqlCatalog:
    """The Catalog protocol (catalog.py) over Iceberg's JDBC catalog tables."""

    names_our_files = True

    def __init__(self, name: str, uri: str) -> None:
        self.name, self.uri = name, uri
        self.described = _described(name, uri)
        self._catalog: Any = None

    def _pyiceberg(self) -> Any:
        """pyiceberg's SqlCatalog (its tables created when missing), opened at first use: a catalog down when the
        server starts is found by the first request that needs it."""
        if self._catalog is None:
            from pyiceberg.catalog.sql import SqlCatalog as PyicebergSql

            self._catalog = self._call(lambda: PyicebergSql(self.name, uri=self.uri, pool_pre_ping="true"))
        return self._catalog

    def _call(self, action: Any) -> Any:
        return with_retries(self.described, classify, action)

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.engine.dispose()
            self._catalog = None

    def location(self, namespace: str, name: str) -> str | None:
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        catalog = self._pyiceberg()

        def read() -> str | None:
            with Session(catalog.engine) as session:
                return session.scalar(select(IcebergTables.metadata_location).where(
                    IcebergTables.catalog_name == self.name, IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == name))
        return self._call(read)

    def register(self, namespace: str, name: str, location: str, table: TableDef) -> None:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        catalog = self._pyiceberg()

        def register() -> None:
            if not catalog.namespace_exists(namespace):
                try:
                    catalog.create_namespace(namespace)
                except NamespaceAlreadyExistsError:  # created meanwhile by another writer
                    pass
            try:
                self._insert(catalog, namespace, name, location)
            except TableAlreadyExistsError:  # registered meanwhile: the caller's next look moves it
                pass
        self._call(register)

    @staticmethod
    def _insert(catalog: Any, namespace: str, name: str, location: str) -> None:
        """pyiceberg's `register_table` without its load of the table afterwards (a read of the metadata file the
        destination has just written: not needed)."""
        from pyiceberg.catalog.sql import IcebergTables
        from pyiceberg.exceptions import TableAlreadyExistsError
        from sqlalchemy import insert
        from sqlalchemy.exc import IntegrityError
        from sqlalchemy.orm import Session

        with Session(catalog.engine) as session:
            try:
                session.execute(insert(IcebergTables).values(**catalog._create_table_row(namespace, name, location)))
                session.commit()
            except IntegrityError as exc:
                raise TableAlreadyExistsError(f"{namespace}.{name}") from exc

    def advance(self, namespace: str, name: str, location: str, previous: str, table: TableDef) -> bool:
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import update
        from sqlalchemy.orm import Session

        catalog = self._pyiceberg()

        def swap() -> bool:
            with Session(catalog.engine) as session:
                result = session.execute(update(IcebergTables).where(
                    IcebergTables.catalog_name == self.name, IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == name, IcebergTables.metadata_location == previous,
                ).values(metadata_location=location, previous_metadata_location=previous))
                session.commit()
                return bool(getattr(result, "rowcount", 0))  # a CursorResult: rows the UPDATE matched
        return bool(self._call(swap))

    def drop(self, namespace: str, name: str) -> None:
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import delete
        from sqlalchemy.orm import Session

        catalog = self._pyiceberg()

        def remove() -> None:
            with Session(catalog.engine) as session:
                session.execute(delete(IcebergTables).where(
                    IcebergTables.catalog_name == self.name, IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == name))
                session.commit()
        self._call(remove)


def sql_keeps(ch: str) -> bool:
    """The JDBC catalog holds any text up to 255 characters; a `.` in a namespace would nest it (Iceberg's
    multi-level namespaces), so `.` is mapped in both names."""
    return ch != "." and ch.isprintable()
