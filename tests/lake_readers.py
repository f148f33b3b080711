"""The independent readers the tests read a table's Delta Lake and Iceberg metadata back with, at the table's folder:
delta-rs (`deltalake`), DuckDB's delta and iceberg extensions (from PyPI, never downloaded at run time), polars, and
pyiceberg's StaticTable. Each returns rows as Python values, normalised (`canonical`) so that readers returning other
Arrow types for the same value (int32 for SHORT, large strings, µs timestamps) compare equal."""
from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb
import polars as pl
import pyarrow as pa
from deltalake import DeltaTable
from pyiceberg.table import StaticTable

from destination.storage.base import StorageSpec
from destination.table_formats.delta import delta_storage_options
from destination.table_formats.iceberg import file_io_properties

Reader = Callable[[StorageSpec, str], pa.Table]


def _path(url: str) -> str:
    """A table URL as DuckDB takes it: file:///… as a local path, s3://… as it is."""
    return unquote(urlparse(url).path) if url.startswith("file:") else url


def _extension(module: Any) -> str:
    return str(sorted(Path(module.__file__).parent.glob("extensions/*/*.duckdb_extension"))[-1])


def duck(spec: StorageSpec) -> duckdb.DuckDBPyConnection:
    """DuckDB with PyPI's delta, avro and iceberg extensions (and httpfs plus a secret for an S3 root): a new
    connection to a database made once per S3 server and keys (loading the extensions takes seconds)."""
    return _database(_s3_of(spec)).cursor()


def own_duck(spec: StorageSpec) -> duckdb.DuckDBPyConnection:
    """A database of its own, for a test that changes it (a secret, an attached catalog): the shared one's cursors
    share those."""
    return _connect(_s3_of(spec))


def _s3_of(spec: StorageSpec) -> tuple[str, str, str, str] | None:
    if not spec.is_s3:
        return None
    return spec.s3_endpoint, spec.s3_region or "us-east-1", spec.access_key_id, spec.secret_access_key


@functools.cache
def _database(s3: tuple[str, str, str, str] | None) -> duckdb.DuckDBPyConnection:
    return _connect(s3)


def _connect(s3: tuple[str, str, str, str] | None) -> duckdb.DuckDBPyConnection:
    """Without DuckDB's file cache, each query reads the table's files as they are now, as a new database would."""
    import duckdb_extension_avro
    import duckdb_extension_delta
    import duckdb_extension_httpfs
    import duckdb_extension_iceberg

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "enable_external_file_cache": False})
    con.execute("SET TimeZone = 'UTC'")
    for module in (duckdb_extension_delta, duckdb_extension_avro, duckdb_extension_iceberg):
        con.execute(f"LOAD '{_extension(module)}'")
    if s3 is not None:
        endpoint, region, key_id, secret = s3
        con.execute(f"LOAD '{_extension(duckdb_extension_httpfs)}'")
        con.execute("CREATE SECRET s3 (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL false, "
                    "REGION ?)", [key_id, secret, urlparse(endpoint).netloc, region])
    return con


def polars_options(spec: StorageSpec) -> dict[str, str] | None:
    """polars reads the data files with its own object store: the S3 endpoint and credentials for it."""
    if not spec.is_s3:
        return None
    return {"aws_endpoint_url": spec.s3_endpoint, "aws_access_key_id": spec.access_key_id,
            "aws_secret_access_key": spec.secret_access_key, "aws_region": spec.s3_region or "us-east-1",
            "aws_allow_http": "true", "aws_virtual_hosted_style_request": "false"}


def delta_table(spec: StorageSpec, url: str, version: int | None = None) -> DeltaTable:
    return DeltaTable(url, version=version, storage_options=delta_storage_options(spec))


def delta_rs(spec: StorageSpec, url: str, version: int | None = None) -> pa.Table:
    return pa.table(delta_table(spec, url, version).to_pyarrow_table())


def delta_duckdb(spec: StorageSpec, url: str, version: int | None = None) -> pa.Table:
    travel = f", version => {version}" if version is not None else ""
    return duck(spec).execute(f"SELECT * FROM delta_scan('{_path(url)}'{travel})").to_arrow_table()


def delta_polars(spec: StorageSpec, url: str, version: int | dt.datetime | None = None) -> pa.Table:
    return pl.scan_delta(url, version=version, storage_options=polars_options(spec)).collect().to_arrow()


def iceberg_table(spec: StorageSpec, url: str) -> StaticTable:
    return StaticTable.from_metadata(url, properties=file_io_properties(spec))


def iceberg_pyiceberg(spec: StorageSpec, url: str, snapshot_id: int | None = None) -> pa.Table:
    return iceberg_table(spec, url).scan(snapshot_id=snapshot_id).to_arrow()


def iceberg_pyiceberg_as_of(spec: StorageSpec, url: str, version: int) -> pa.Table:
    """Version N through its own metadata file (`metadata/v<N>.metadata.json`): its schema and name mapping, so a
    column whose type changed later reads as it was (through the latest metadata, snapshot N reads it as NULL)."""
    return iceberg_table(spec, f"{url}/metadata/v{version}.metadata.json").scan().to_arrow()


def iceberg_duckdb(spec: StorageSpec, url: str) -> pa.Table:
    return duck(spec).execute(f"SELECT * FROM iceberg_scan('{_path(url)}')").to_arrow_table()


def iceberg_polars(spec: StorageSpec, url: str) -> pa.Table:
    return pl.scan_iceberg(iceberg_table(spec, url), storage_options=polars_options(spec)).collect().to_arrow()


DELTA_READERS: dict[str, Reader] = {"deltalake": delta_rs, "duckdb-delta": delta_duckdb, "polars-delta": delta_polars}
ICEBERG_READERS: dict[str, Reader] = {"pyiceberg": iceberg_pyiceberg, "duckdb-iceberg": iceberg_duckdb,
                                      "polars-iceberg": iceberg_polars}


def canonical(value: Any) -> Any:
    """One form per value whatever Arrow type a reader chose for it."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(float(value))
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value == value else "nan"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def rows(table: pa.Table | Iterable[dict[str, Any]], columns: list[str]) -> list[tuple[Any, ...]]:
    """The rows' values in `columns`, canonical, sorted: a multiset to compare readers by."""
    listed = table.to_pylist() if isinstance(table, pa.Table) else list(table)
    return sorted((tuple(canonical(r.get(c)) for c in columns) for r in listed), key=repr)
