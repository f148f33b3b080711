"""The catalog fields of the configuration (`catalog` and the fields of the kind chosen; their form fields are in
destination/rpc/configuration.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from destination.shared.errors import UserActionRequired
from destination.shared.storage.base import StorageSpec

CATALOG_FIELD = "catalog"
NO_CATALOG, SQL, GLUE = "none", "sql", "glue"
KINDS = (NO_CATALOG, SQL, GLUE)
URI_FIELD = "catalog_uri"
NAME_FIELD = "catalog_name"
GLUE_REGION_FIELD = "glue_region"
GLUE_ENDPOINT_FIELD = "glue_endpoint"
GLUE_KEY_FIELD = "glue_access_key_id"
GLUE_SECRET_FIELD = "glue_secret_access_key"
DEFAULT_CATALOG_NAME = "fivetran"
MAX_NAME = 255  # the JDBC catalog's columns are VARCHAR(255); Glue's names are at most 255 characters too


@dataclass(frozen=True)
class CatalogSettings:
    """Which catalog registers the tables, and how to reach it. `repr` leaves the credentials out (the settings
    key the server's stores, whose reprs may reach a log line)."""

    kind: str = NO_CATALOG
    uri: str = ""  # sql: a SQLAlchemy URL (it may hold a password)
    name: str = DEFAULT_CATALOG_NAME  # sql: the JDBC catalog's `catalog_name` (Spark's catalog name, by custom)
    region: str = ""  # glue
    endpoint: str = ""
    access_key_id: str = ""
    secret_access_key: str = ""

    def __repr__(self) -> str:
        return f"CatalogSettings(kind={self.kind!r}, name={self.name!r})"

    @property
    def on(self) -> bool:
        return self.kind != NO_CATALOG


def catalog_settings(configuration: dict[str, str], s3_region: str = "", access_key_id: str = "",
                     secret_access_key: str = "") -> CatalogSettings:
    """The configuration's catalog; a Task names a field missing or wrong. Glue's region and credentials default
    to the S3 ones given (the same AWS account, usually)."""
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
    return CatalogSettings(
        kind=GLUE, name=name,
        region=(configuration.get(GLUE_REGION_FIELD) or "").strip() or s3_region or "us-east-1",
        endpoint=(configuration.get(GLUE_ENDPOINT_FIELD) or "").strip(),
        access_key_id=(configuration.get(GLUE_KEY_FIELD) or "").strip() or access_key_id,
        secret_access_key=configuration.get(GLUE_SECRET_FIELD) or secret_access_key)


def catalog_from_file(path: str | None, spec: StorageSpec) -> CatalogSettings | None:
    """The catalog of a configuration file (`formats --catalog`, `serve --catalog`: a file keeps the credentials off
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
                                spec.access_key_id, spec.secret_access_key)
    if not settings.on:
        raise UserActionRequired(f"--catalog {path}: its field 'catalog' names no catalog")
    return settings
