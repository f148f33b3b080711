"""The `rest` catalog: an Iceberg REST catalog (Apache Polaris, Snowflake Open Catalog, Lakekeeper, Gravitino,
Unity Catalog's Iceberg endpoint, SeaweedFS), through pyiceberg's RestCatalog, with OAuth2 client credentials or
a bearer token.

The entry is made with `register_table`, naming the table's Iceberg metadata file. REST has no call that points
an entry at another metadata file, so each move is a `commit_table` whose updates turn the catalog's current
metadata into the records version's (destination/table_formats/iceberg.py): the new schema when it changed, the
snapshots the catalog lacks and the `main` ref on the newest, the snapshots retention expired removed, the
table's properties. The catalog writes a metadata file of its own for it (named as it names them). Requirements
guard the move: the table's UUID, `main` at the snapshot read and the current schema; another writer's move in
between fails the commit (409), and `advance` answers False.

Which records version the catalog's metadata is: the table property `records-destination.metadata-location`,
set by every move, names the records version's metadata file the catalog's current metadata equals; before the
first move the catalog's own `metadata-location` is that file (the one registered). `location` answers it, so
publish.py's rule holds as for the other kinds: retention keeps every version from the one the entry names, whose
snapshots are exactly those the catalog's current metadata lists.

pyiceberg's RestCatalog does every call but the move: its `commit_table` takes the updates as they are (used),
but the Table API builds them from its own transaction, not from a metadata file already written, so the updates
are made here from the two metadata documents.
"""
from __future__ import annotations

from typing import Any

from destination.catalogs.catalog import foreign_entry, with_retries
from destination.catalogs.catalog_settings import CatalogSettings
from destination.model.table_model import TableDef

VERSION_PROPERTY = "records-destination.metadata-location"
TIMEOUT_SECONDS = (5.0, 30.0)  # connect, read: a catalog that accepts and never answers is unavailable, not a hang
MAIN = "main"
_WRITER_PROPERTIES = ("schema.name-mapping.default", "fivetran.primary-key", "comment")  # removed when ours lack them


def classify(exc: Exception) -> str | None:
    """transient (unreachable, 5xx, throttled), refused (401/403, the OAuth2 server's refusal, a request the
    catalog answers 400: e.g. a metadata file outside the locations it holds), or None."""
    from pyiceberg import exceptions as ice
    from requests.exceptions import ConnectionError, Timeout

    if isinstance(exc, ConnectionError | Timeout | ice.ServiceUnavailableError | ice.ServerError
                  | ice.CommitStateUnknownException | ice.TooManyRequestsError):
        return "transient"
    if isinstance(exc, ice.UnauthorizedError | ice.ForbiddenError | ice.OAuthError | ice.AuthorizationExpiredError
                  | ice.BadRequestError):
        return "refused"
    return None


def shown_url(uri: str) -> str:
    """`uri` as messages and logs name it: a user and password in it, and its query's values, as `***`."""
    shown = uri
    for secret in url_secrets(uri):
        shown = shown.replace(secret, "***")
    return shown


def url_secrets(uri: str) -> tuple[str, ...]:
    """What a URL may hold that is a credential: its user and password, its query's values, longest first (so a
    value holding another is hidden whole)."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    found = [parts.netloc.rsplit("@", 1)[0], parts.username or "", parts.password or ""] if "@" in parts.netloc else []
    found += [pair.split("=", 1)[1] for pair in parts.query.split("&") if "=" in pair]
    return tuple(sorted({s for s in found if s}, key=len, reverse=True))


def rest_keeps(ch: str) -> bool:
    """A REST catalog names a table by path segments: `.` would nest a namespace (multi-level namespaces), `/` and
    `%` would be read as a path or an escape by some servers; letters, digits, `_`, `-` and `$` are held by every
    one, other characters are mapped."""
    return ch.isascii() and (ch.isalnum() or ch in "_-$")


class RestCatalog:
    """The Catalog protocol (catalog.py) over an Iceberg REST catalog."""

    names_our_files = False  # the catalog writes its own metadata files; `_check_ours` finds another's entry

    def __init__(self, settings: CatalogSettings) -> None:
        self.settings = settings
        shown = shown_url(settings.uri) + (f", warehouse {settings.warehouse}" if settings.warehouse else "")
        self.described = f"rest catalog {settings.name!r} ({shown})"
        self._catalog: Any = None

    def _properties(self) -> dict[str, str]:
        s = self.settings
        properties = {"uri": s.uri, **dict(s.storage_io)}
        if s.warehouse:
            properties["warehouse"] = s.warehouse
        if s.client_id:
            properties["credential"] = f"{s.client_id}:{s.client_secret}"
            properties["oauth2-server-uri"] = s.oauth_uri or f"{s.uri}/v1/oauth/tokens"
        elif s.token:
            properties["token"] = s.token
        if s.scope:
            properties["scope"] = s.scope
        return properties

    def _rest(self) -> Any:
        """pyiceberg's RestCatalog, opened at first use (its config call and token): a catalog down when the server
        starts is found by the first request that needs it."""
        if self._catalog is None:
            self._catalog = self._call(lambda: _timed_rest_catalog(self.settings.name, self._properties()))
        return self._catalog

    def _call(self, action: Any) -> Any:
        return with_retries(self.described, classify, action, hidden=url_secrets(self.settings.uri))

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    def _load(self, namespace: str, name: str) -> Any:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self._rest().load_table((namespace, name))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    @staticmethod
    def _named(table: Any) -> str:
        return str(table.properties.get(VERSION_PROPERTY) or table.metadata_location)

    def location(self, namespace: str, name: str) -> str | None:
        table = self._call(lambda: self._load(namespace, name))
        return None if table is None else self._named(table)

    def register(self, namespace: str, name: str, location: str, table: TableDef) -> None:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        catalog = self._rest()

        def register() -> None:
            if not catalog.namespace_exists(namespace):  # a principal may read namespaces it cannot create
                try:
                    catalog.create_namespace(namespace)
                except NamespaceAlreadyExistsError:  # created meanwhile by another writer
                    pass
            try:
                catalog.register_table((namespace, name), location)
            except TableAlreadyExistsError:  # registered meanwhile: the caller reads it again
                pass
        self._call(register)

    def advance(self, namespace: str, name: str, location: str, previous: str, table: TableDef) -> bool:
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.io import load_file_io
        from pyiceberg.serializers import FromInputFile

        catalog = self._rest()

        def move() -> bool:
            current = self._load(namespace, name)
            if current is None or self._named(current) != previous:
                return False
            self._check_ours(namespace, name, current, location)
            target = FromInputFile.table_metadata(load_file_io(self._properties(), location).new_input(location))
            requirements, updates = commit_of(current.metadata, target, location)
            try:
                catalog.commit_table(current, requirements, updates)
            except CommitFailedException:  # another writer moved it first
                return False
            return True
        return bool(self._call(move))

    def _check_ours(self, namespace: str, name: str, current: Any, location: str) -> None:
        """An entry the destination did not make (no property, another metadata file, snapshots) is another
        table's: never overwritten. An empty one (made by the catalog's own create-table) is taken."""
        folder = location.rsplit("/", 1)[0]
        if (VERSION_PROPERTY not in current.properties and current.metadata.snapshots
                and not str(current.metadata_location).startswith(folder + "/")):
            raise foreign_entry(self.described, f"{namespace}.{name}", f"it names {current.metadata_location}")

    def drop(self, namespace: str, name: str) -> None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        catalog = self._rest()

        def drop() -> None:
            try:
                catalog.drop_table((namespace, name), purge_requested=False)
            except (NoSuchTableError, NoSuchNamespaceError):
                pass
        self._call(drop)


def _timed_rest_catalog(name: str, properties: dict[str, str]) -> Any:
    """pyiceberg's RestCatalog whose requests time out (it sets none, and has no property for one). Each of its
    sessions (the config call's included) is handed to `_create_legacy_oauth2_auth_manager` before its first
    request, the OAuth2 token's (the auth used when no `auth` property is given, as here): the timeout goes on
    there."""
    from pyiceberg.catalog.rest import RestCatalog as PyicebergRest

    class TimedRestCatalog(PyicebergRest):
        def _create_legacy_oauth2_auth_manager(self, session: Any) -> Any:
            request = session.request

            def timed(method: str, url: str, **kwargs: Any) -> Any:
                return request(method, url, **{"timeout": TIMEOUT_SECONDS, **kwargs})
            session.request = timed
            return super()._create_legacy_oauth2_auth_manager(session)

    return TimedRestCatalog(name, **properties)


def commit_of(current: Any, target: Any, location: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The requirements and updates turning the catalog's metadata `current` into the records version's
    `target` (both pyiceberg TableMetadata), whose file is `location`."""
    from pyiceberg.table.update import (
        AddSchemaUpdate,
        AddSnapshotUpdate,
        AssertCurrentSchemaId,
        AssertRefSnapshotId,
        AssertTableUUID,
        RemovePropertiesUpdate,
        RemoveSnapshotsUpdate,
        SetCurrentSchemaUpdate,
        SetPropertiesUpdate,
        SetSnapshotRefUpdate,
    )

    requirements = (AssertTableUUID(uuid=current.table_uuid),
                    AssertRefSnapshotId.model_validate({"ref": MAIN, "snapshot-id": current.current_snapshot_id}),
                    AssertCurrentSchemaId.model_validate({"current-schema-id": current.current_schema_id}))
    updates: list[Any] = []
    ids = schema_ids(current, target)
    catalog_ids = {s.schema_id for s in current.schemas}
    for ours in target.schemas:
        if ids[ours.schema_id] not in catalog_ids:
            updates.append(AddSchemaUpdate.model_validate({"schema": ours.model_copy(
                update={"schema_id": ids[ours.schema_id]})}))
    if ids[target.current_schema_id] != current.current_schema_id:
        updates.append(SetCurrentSchemaUpdate.model_validate({"schema-id": ids[target.current_schema_id]}))
    held = {s.snapshot_id for s in current.snapshots}
    updates += [AddSnapshotUpdate(snapshot=s.model_copy(update={"schema_id": ids.get(s.schema_id, s.schema_id)}))
                for s in target.snapshots if s.snapshot_id not in held]
    if target.current_snapshot_id is not None and target.current_snapshot_id != current.current_snapshot_id:
        updates.append(SetSnapshotRefUpdate.model_validate({"ref-name": MAIN, "type": "branch",
                                                            "snapshot-id": target.current_snapshot_id}))
    kept = {s.snapshot_id for s in target.snapshots}
    expired = [s.snapshot_id for s in current.snapshots if s.snapshot_id not in kept]
    if expired:  # retention deleted (or will delete) their files
        updates.append(RemoveSnapshotsUpdate.model_validate({"snapshot-ids": expired}))
    updates.append(SetPropertiesUpdate(updates={**target.properties, VERSION_PROPERTY: location}))
    gone = [k for k in _WRITER_PROPERTIES if k in current.properties and k not in target.properties]
    if gone:
        updates.append(RemovePropertiesUpdate(removals=gone))
    return requirements, tuple(updates)


def schema_ids(current: Any, target: Any) -> dict[int, int]:
    """Each schema id of `target` → the catalog's id of that schema: an existing schema of the same fields (of
    the same id first), else the next new id, as catalogs number an added schema (Iceberg's Java library: the
    highest id + 1, the id sent ignored). A table registered from its metadata file holds its ids unchanged; an
    entry the catalog made (its own schema 0) shifts them. Snapshots name their schema by the catalog's id."""
    ids: dict[int, int] = {}
    next_id = max((s.schema_id for s in current.schemas), default=-1) + 1
    for ours in target.schemas:
        same = sorted((s for s in current.schemas if s.fields == ours.fields),
                      key=lambda s: (s.schema_id != ours.schema_id, -s.schema_id))
        if same:
            ids[ours.schema_id] = same[0].schema_id
        else:
            ids[ours.schema_id], next_id = next_id, next_id + 1
    return ids
