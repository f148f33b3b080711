"""The `glue` catalog: AWS Glue's Iceberg tables, as pyiceberg's GlueCatalog (and Athena, Spark's GlueCatalog,
Trino's glue metastore) read them: a table of `table_type` ICEBERG whose `metadata_location` names the current
metadata file and `previous_metadata_location` the one before, with the current schema's columns.

Where Delta Lake is on, the Delta table too, in the database named as the schema's plus `_delta`, under the same
table name (one Glue database holds one table per name, and a reader picks a format by database): a table of
`table_type` DELTA (as Athena's `CREATE EXTERNAL TABLE … TBLPROPERTIES ('table_type'='DELTA')` registers it) with
`spark.sql.sources.provider` delta and the folder as its location and SerDe `path` (as Spark registers a Delta
table in Glue). It names no version: readers find the latest in the folder's `_delta_log`, so it never moves. Its
columns are left out: Athena and Spark read the schema from the log.

Written with boto3 rather than pyiceberg's GlueCatalog: its `register_table` and `commit_table` read or write the
metadata file themselves (commit writes a new one from a list of updates), while ours is already written
(destination/table_formats/iceberg.py). The move is what GlueCatalog's commit does inside: `update_table` with the
new parameters and the `VersionId` read with the old ones (Glue's optimistic concurrency: another writer's move in
between fails it with ConcurrentModificationException).
"""
from __future__ import annotations

from typing import Any

from destination.catalogs.catalog import MARK_PROPERTY, ForeignEntry, foreign_entry, with_retries
from destination.catalogs.catalog_settings import CatalogSettings
from destination.model.table_model import TableDef

TRANSIENT_CODES = {"ThrottlingException", "InternalServiceException", "OperationTimeoutException",
                   "ServiceUnavailableException", "ResourceNumberLimitExceededException"}
REFUSED_CODES = {"AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
                 "SignatureDoesNotMatch", "ExpiredTokenException", "InvalidClientTokenId", "AccessDenied"}


def classify(exc: Exception) -> str | None:
    from botocore.exceptions import ClientError, ConnectionError, EndpointConnectionError, NoCredentialsError

    if isinstance(exc, NoCredentialsError):
        return "refused"
    if isinstance(exc, EndpointConnectionError | ConnectionError):
        return "transient"
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in REFUSED_CODES or status in (401, 403):
            return "refused"
        if code in TRANSIENT_CODES or status >= 500:
            return "transient"
    return None


DELTA_DATABASE_SUFFIX = "_delta"


class EntryTaken(ForeignEntry):
    """A Glue table of the name the destination registers exists and is not of its format (another table's)."""


def glue_keeps(ch: str) -> bool:
    """Glue (and Athena) hold lower-case letters, digits and `_` in database and table names."""
    return ch.isascii() and (ch.islower() or ch.isdigit() or ch == "_")


class GlueCatalog:
    """The Catalog protocol (catalog.py) over AWS Glue's Data Catalog."""

    names_our_files = True

    def __init__(self, settings: CatalogSettings) -> None:
        import boto3
        import botocore.config

        self.described = f"glue catalog ({settings.region}{', ' + settings.endpoint if settings.endpoint else ''})"
        self._client: Any = boto3.client(
            "glue", region_name=settings.region, endpoint_url=settings.endpoint or None,
            aws_access_key_id=settings.access_key_id or None,
            aws_secret_access_key=settings.secret_access_key or None,
            config=botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=30))

    def _call(self, action: Any) -> Any:
        return with_retries(self.described, classify, action)

    def close(self) -> None:
        self._client.close()  # its connection pool; botocore opens a new one at the next call

    def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._client.get_table(DatabaseName=namespace, Name=name)["Table"])
        except self._client.exceptions.EntityNotFoundException:
            return None

    def location(self, namespace: str, name: str) -> str | None:
        """The metadata file the entry names; an entry without the destination's mark naming that file's table
        folder is another's (a Task, see catalog.py's `ForeignEntry`)."""
        table = self._call(lambda: self._get(namespace, name))
        if table is None:
            return None
        parameters = table.get("Parameters") or {}
        location, mark = parameters.get("metadata_location"), parameters.get(MARK_PROPERTY)
        if location is None or mark != location.rsplit("/metadata/", 1)[0]:
            raise foreign_entry(self.described, f"{namespace}.{name}", _holder(parameters))
        return str(location)

    def _input(self, name: str, location: str, previous: str | None, table: TableDef,
               kept: dict[str, str] | None = None) -> dict[str, Any]:
        """The ICEBERG entry naming `location`, every column of the table's Iceberg schema in Glue's (Hive) type
        names as pyiceberg's GlueCatalog writes them; `kept`: the parameters the entry has (others' stay)."""
        folder = location.rsplit("/metadata/", 1)[0]
        parameters = {**(kept or {}), "table_type": "ICEBERG", "metadata_location": location, MARK_PROPERTY: folder}
        if previous:
            parameters["previous_metadata_location"] = previous
        return {"Name": name, "TableType": "EXTERNAL_TABLE", "Parameters": parameters,
                "StorageDescriptor": {"Location": folder, "Columns": glue_columns(table)}}

    def register(self, namespace: str, name: str, location: str, table: TableDef) -> None:
        self._create(namespace, self._input(name, location, None, table), "ICEBERG")

    def _create(self, database: str, entry: dict[str, Any], kind: str, folder: str | None = None) -> None:
        """`entry` created in `database` (created first if absent); an entry of its name there already (registered
        meanwhile: the caller reads it again) must be of `kind` (and, given `folder`, marked with it)."""
        client = self._client

        def create() -> None:
            try:
                client.create_database(DatabaseInput={"Name": database})
            except client.exceptions.AlreadyExistsException:
                pass
            try:
                client.create_table(DatabaseName=database, TableInput=entry)
            except client.exceptions.AlreadyExistsException:
                self._check_kind(database, entry["Name"], kind, folder)
        self._call(create)

    def _check_kind(self, namespace: str, name: str, kind: str, folder: str | None = None) -> None:
        """A table of the name is of `kind` (and, given `folder`, marked with it), else a Task naming it."""
        existing = self._get(namespace, name)
        parameters = {} if existing is None else (existing.get("Parameters") or {})
        found = str(parameters.get("table_type", "")).upper()
        if existing is not None and found != kind:
            raise EntryTaken(f"the {self.described} already holds a table {namespace}.{name} of table_type "
                             f"{found or 'none'}, not {kind}: drop or rename it, or choose another catalog")
        if existing is not None and folder is not None and parameters.get(MARK_PROPERTY) != folder:
            raise foreign_entry(self.described, f"{namespace}.{name}", _holder(parameters))

    def register_delta(self, namespace: str, name: str, folder: str) -> None:
        """The Delta table's entry (in `<namespace>_delta`), unless it is there."""
        database = namespace + DELTA_DATABASE_SUFFIX
        entry = {"Name": name, "TableType": "EXTERNAL_TABLE",
                 "Parameters": {"table_type": "DELTA", "EXTERNAL": "TRUE", "spark.sql.sources.provider": "delta",
                                MARK_PROPERTY: folder},
                 "StorageDescriptor": {"Location": folder, "Columns": [],
                                       "SerdeInfo": {"Parameters": {"path": folder}}}}
        self._create(database, entry, "DELTA", folder)

    def drop_delta(self, namespace: str, name: str, folder: str) -> None:
        database = namespace + DELTA_DATABASE_SUFFIX
        existing = self._call(lambda: self._get(database, name))
        if existing is not None and (existing.get("Parameters") or {}).get(MARK_PROPERTY) == folder:
            self._drop(database, name)

    def advance(self, namespace: str, name: str, location: str, previous: str, table: TableDef) -> bool:
        client = self._client

        def swap() -> bool:
            current = self._get(namespace, name)
            if current is None or (current.get("Parameters") or {}).get("metadata_location") != previous:
                return False
            try:
                entry = self._input(name, location, previous, table, current.get("Parameters"))
                client.update_table(DatabaseName=namespace, TableInput=entry, VersionId=current["VersionId"])
            except client.exceptions.ConcurrentModificationException:
                return False
            return True
        return bool(self._call(swap))

    def drop(self, namespace: str, name: str) -> None:
        self._drop(namespace, name)

    def _drop(self, database: str, name: str) -> None:
        client = self._client

        def drop() -> None:
            try:
                client.delete_table(DatabaseName=database, Name=name)
            except client.exceptions.EntityNotFoundException:
                pass
        self._call(drop)


def _holder(parameters: dict[str, str]) -> str:
    """What a Glue table the destination did not make is, for its Task."""
    return (f"table_type {parameters.get('table_type') or 'none'}, metadata_location "
            f"{parameters.get('metadata_location') or 'none'}, {MARK_PROPERTY} {parameters.get(MARK_PROPERTY) or 'none'}")


def glue_columns(table: TableDef) -> list[dict[str, Any]]:
    """Every column of the table's Iceberg schema (destination/table_formats/iceberg.py), typed and described as
    pyiceberg's GlueCatalog lists them (Hive's names: `bigint`, `timestamp`, `decimal(p,s)`, `string`...), which is
    what Athena and Spark's Glue catalog show."""
    from pyiceberg.catalog.glue import _IcebergSchemaToGlueType
    from pyiceberg.schema import visit

    from destination.table_formats.iceberg import iceberg_schema

    return [{"Name": field.name, "Type": visit(field.field_type, _IcebergSchemaToGlueType()),
             "Comment": (field.doc or "")[:255],
             "Parameters": {"iceberg.field.id": str(field.field_id), "iceberg.field.optional": str(field.optional).lower(),
                            "iceberg.field.current": "true"}}
            for field in iceberg_schema(table).columns]
