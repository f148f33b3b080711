"""The catalog fields of the configuration (`catalog` and the fields of the kind chosen; their form fields are in
destination/rpc/configuration.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from destination.runtime.errors import UserActionRequired
from destination.storage.base import StorageSpec

CATALOG_FIELD = "catalog"
NO_CATALOG, SQL, GLUE, REST = "none", "sql", "glue", "rest"
KINDS = (NO_CATALOG, SQL, GLUE, REST)
URI_FIELD = "catalog_uri"
NAME_FIELD = "catalog_name"
GLUE_REGION_FIELD = "glue_region"
GLUE_ENDPOINT_FIELD = "glue_endpoint"
GLUE_KEY_FIELD = "glue_access_key_id"
GLUE_SECRET_FIELD = "glue_secret_access_key"
REST_URI_FIELD = "rest_uri"
REST_WAREHOUSE_FIELD = "rest_warehouse"
REST_CLIENT_ID_FIELD = "rest_client_id"
REST_CLIENT_SECRET_FIELD = "rest_client_secret"
REST_TOKEN_FIELD = "rest_token"
REST_SCOPE_FIELD = "rest_scope"
REST_OAUTH_URI_FIELD = "rest_oauth2_server_uri"
DEFAULT_CATALOG_NAME = "fivetran"
MAX_NAME = 255  # the JDBC catalog's columns are VARCHAR(255); Glue's names are at most 255 characters too


@dataclass(frozen=True)
class CatalogSettings:
    """Which catalog registers the tables, and how to reach it. `repr` leaves the credentials out (the settings
    key the server's stores, whose reprs may reach a log line)."""

    kind: str = NO_CATALOG
    uri: str = ""  # sql: a SQLAlchemy URL (it may hold a password); rest: the catalog's base URL
    name: str = DEFAULT_CATALOG_NAME  # sql: the JDBC catalog's `catalog_name` (Spark's catalog name, by custom)
    region: str = ""  # glue
    endpoint: str = ""
    access_key_id: str = ""
    secret_access_key: str = ""
    warehouse: str = ""  # rest: the warehouse (catalog) asked for
    client_id: str = ""  # rest: OAuth2 client credentials, or a bearer token
    client_secret: str = ""
    token: str = ""
    scope: str = ""
    oauth_uri: str = ""
    storage_io: tuple[tuple[str, str], ...] = ()  # rest: pyiceberg FileIO properties reaching the table files

    def __repr__(self) -> str:
        return f"CatalogSettings(kind={self.kind!r}, name={self.name!r})"

    @property
    def on(self) -> bool:
        return self.kind != NO_CATALOG


def catalog_settings(configuration: dict[str, str], s3_region: str = "", access_key_id: str = "",
                     secret_access_key: str = "", s3_endpoint: str = "") -> CatalogSettings:
    """The configuration's catalog; a Task names a field missing or wrong. Glue's region and credentials default
    to the S3 ones given (the same AWS account, usually); the rest catalog reads the table's metadata files with
    the S3 ones (`s3_endpoint` empty: the configuration's)."""
    kind = (configuration.get(CATALOG_FIELD) or "").strip().lower() or NO_CATALOG
    if kind not in KINDS:
        raise UserActionRequired(f"configuration field {CATALOG_FIELD!r}: {kind!r} is not one of {', '.join(KINDS)}")
    if kind == NO_CATALOG:
        return CatalogSettings()
    name = (configuration.get(NAME_FIELD) or "").strip() or DEFAULT_CATALOG_NAME
    if kind == SQL:
        uri = (configuration.get(URI_FIELD) or "").strip()
        if not uri:
            raise UserActionRequired(f"configuration field {URI_FIELD!r} is empty: the sql catalog needs a SQLAlchemy "
                                     "URL, e.g. sqlite:////var/lib/catalog.db or "
                                     "postgresql+psycopg://user:password@host:5432/database")
        return CatalogSettings(kind=SQL, uri=uri, name=name)
    if kind == REST:
        return rest_settings(configuration, name, StorageSpec(
            root="", s3_endpoint=s3_endpoint or (configuration.get("s3_endpoint") or "").strip(),
            s3_region=s3_region, access_key_id=access_key_id, secret_access_key=secret_access_key))
    return CatalogSettings(
        kind=GLUE, name=name,
        region=(configuration.get(GLUE_REGION_FIELD) or "").strip() or s3_region or "us-east-1",
        endpoint=(configuration.get(GLUE_ENDPOINT_FIELD) or "").strip(),
        access_key_id=(configuration.get(GLUE_KEY_FIELD) or "").strip() or access_key_id,
        secret_access_key=configuration.get(GLUE_SECRET_FIELD) or secret_access_key)


def rest_settings(configuration: dict[str, str], name: str, s3: StorageSpec) -> CatalogSettings:
    """The rest catalog's fields: its URL, the warehouse, and OAuth2 client credentials or a bearer token (or
    neither: a catalog open to all)."""
    def field(key: str) -> str:
        return (configuration.get(key) or "").strip()

    uri = field(REST_URI_FIELD)
    if not uri.startswith(("http://", "https://")):
        raise UserActionRequired(f"configuration field {REST_URI_FIELD!r} must be the Iceberg REST catalog's URL, "
                                 "e.g. https://catalog.example.com/api/catalog (got "
                                 f"{'nothing' if not uri else 'a value not starting with http:// or https://'}; not "
                                 "quoted: a malformed URL may hold a credential)")
    client_id, secret, token = field(REST_CLIENT_ID_FIELD), field(REST_CLIENT_SECRET_FIELD), field(REST_TOKEN_FIELD)
    if bool(client_id) != bool(secret):
        raise UserActionRequired(f"configuration fields {REST_CLIENT_ID_FIELD!r} and {REST_CLIENT_SECRET_FIELD!r}: "
                                 "OAuth2 client credentials need both (or neither, with a bearer token in "
                                 f"{REST_TOKEN_FIELD!r})")
    if client_id and token:
        raise UserActionRequired(f"configuration fields {REST_CLIENT_ID_FIELD!r} and {REST_TOKEN_FIELD!r}: give "
                                 "OAuth2 client credentials or a bearer token, not both")
    from destination.table_formats.iceberg import file_io_properties

    storage_io = tuple(sorted(file_io_properties(replace(s3, root="s3://probe")).items())) if s3.access_key_id else ()
    return CatalogSettings(kind=REST, uri=uri.rstrip("/"), name=name, warehouse=field(REST_WAREHOUSE_FIELD),
                           client_id=client_id, client_secret=secret, token=token, scope=field(REST_SCOPE_FIELD),
                           oauth_uri=field(REST_OAUTH_URI_FIELD), storage_io=storage_io)


def catalog_from_file(path: str | None, spec: StorageSpec) -> CatalogSettings | None:
    """The catalog of a configuration file (`publish --catalog`, `serve --catalog`: a file keeps the credentials off
    the command line); None: no file. A file naming no catalog, or unreadable, is a UserActionRequired."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            configuration = json.load(f)
    except (OSError, ValueError) as exc:
        raise UserActionRequired(f"--catalog {path}: cannot read the configuration ({exc})") from exc
    if not isinstance(configuration, dict):
        raise UserActionRequired(f"--catalog {path}: not a JSON object of configuration fields")
    settings = catalog_settings({str(k): str(v) for k, v in configuration.items()}, spec.s3_region,
                                spec.access_key_id, spec.secret_access_key, spec.s3_endpoint)
    if not settings.on:
        raise UserActionRequired(f"--catalog {path}: its field 'catalog' names no catalog")
    return settings
