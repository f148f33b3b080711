"""`tables`, `show`, `changes` and `repair`: read committed versions only (`repair` commits one). S3 credentials come from the
standard AWS environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)."""
from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa

from destination.changes import cdf
from destination.changes.arcion import value_text
from destination.changes.replay import net_between, read_range
from destination.on_disk.datafiles import align, read_data_file
from destination.on_disk.locations import file_dir
from destination.runtime.errors import DestinationError, UserActionRequired
from destination.runtime.settings import s3_credentials, s3_retry_attempts
from destination.storage.base import Storage, StorageSpec, local_root_problem
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore


def open_root(root: str, s3: dict[str, str]) -> Storage:
    """The storage at `root`; a local root must exist (opening it for writes would create it)."""
    problem = local_root_problem(root, must_exist=True)
    if problem is not None:
        raise UserActionRequired(problem)
    access_key_id, secret_access_key = s3_credentials()
    spec = StorageSpec(root=root, s3_endpoint=s3.get("s3_endpoint", ""), s3_region=s3.get("s3_region", ""),
                       access_key_id=access_key_id, secret_access_key=secret_access_key,
                       s3_retry_attempts=s3_retry_attempts())
    return open_storage(spec)


def _store(root: str, s3: dict[str, str]) -> TableStore:
    return TableStore(open_root(root, s3))


def list_tables(root: str, s3: dict[str, str]) -> int:
    store = _store(root, s3)
    print(f"{'schema':<24} {'table':<32} {'version':>8} {'rows':>12} {'files':>6}")
    for schema in store.list_schemas():
        for table in store.list_tables(schema):
            try:
                current = store.load(schema, table)  # the newest complete version
            except DestinationError as exc:
                print(f"{schema:<24} {table:<32} error: {exc}")
                continue
            if current is None:
                continue
            latest = store.latest_version_number(store.table_prefix(schema, table))
            note = (f"  versions after {current.version} lack files: run `repair {schema}.{table}`"
                    if latest > current.version else "")
            print(f"{schema:<24} {table:<32} {current.version:>8} {current.rows:>12} {len(current.files):>6}{note}")
    return 0


def show_table(root: str, name: str, version: int | None, limit: int, s3: dict[str, str]) -> int:
    names = _split(name)
    if names is None:
        return 2
    schema, table = names
    store = _store(root, s3)
    try:
        current = store.load(schema, table, version)
    except DestinationError as exc:
        print(f"error: {exc}")
        return 1
    if current is None:
        print(f"{name}: no such table or version")
        return 1
    parts: list[pa.Table] = []
    for f in current.files:  # read only as many files as the limit needs
        if sum(p.num_rows for p in parts) >= limit:
            break
        parts.append(align(read_data_file(store.storage, file_dir(current.directory, f), f.name), current.table))
    rows = pa.concat_tables(parts).slice(0, limit) if parts else None
    print(f"{name} version {current.version}: {current.rows} rows")
    if rows is not None and rows.num_rows:
        print(rows.to_pandas().to_string(max_colwidth=40))
    return 0


def _split(name: str) -> tuple[str, str] | None:
    if "." not in name:
        print("give the table as SCHEMA.TABLE")
        return None
    schema, table = name.split(".", 1)
    return schema, table


def show_changes(root: str, name: str, start: int, end: int | None, net: bool, limit: int | None, output: str,
                 s3: dict[str, str]) -> int:
    """The changes that take the table from version `start` to `end` (default: the latest), one row per image
    in the Parquet change layout (`_change_type`, `_commit_version`, `_commit_timestamp`); --net: one change per key."""
    names = _split(name)
    if names is None:
        return 2
    store = _store(root, s3)
    prefix = store.table_prefix(*names)
    latest = store.latest_version_number(prefix)
    end = latest if end is None else end
    if latest == 0:
        print(f"{name}: no such table")
        return 1
    if not 0 <= start < end <= latest:
        print(f"{name}: the range must satisfy 0 <= --from-version < --to-version <= {latest} (the latest version)")
        return 2
    try:
        if net:
            events, _table = net_between(store.storage, prefix, start, end)
            rows = cdf.change_rows(events, end, 0).drop_columns([cdf.COMMIT_TIMESTAMP])
        else:
            parts = [cdf.change_rows(v.events, v.version, v.timestamp_us)
                     for v in read_range(store.storage, prefix, start + 1, end)]
            rows = pa.concat_tables(parts, promote_options="permissive")
    except DestinationError as exc:
        print(f"error: {exc}")
        return 1
    total = rows.num_rows
    if limit is not None:
        rows = rows.slice(0, limit)
    if output == "jsonl":
        values = {n: json_values(rows.column(n)) for n in rows.column_names}
        for i in range(rows.num_rows):
            print(json.dumps({n: v[i] for n, v in values.items()}, ensure_ascii=False, allow_nan=False))
        return 0
    print(f"{name}: {'net ' if net else ''}changes from version {start} to {end}: {total} rows")
    if rows.num_rows:
        print(rows.to_pandas().to_string(max_colwidth=40))
    return 0


_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def json_values(column: pa.ChunkedArray) -> list[Any]:
    """A column's values as JSON types: integers as numbers, booleans as true/false, floats as numbers (NaN and
    ±Infinity, which JSON numbers cannot hold, as the strings "NaN", "Infinity", "-Infinity"), NULL as null; any
    other type as the exact text of the change files (decimals at their scale, ISO-8601 times, BINARY as base64)."""
    t = column.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return column.to_pylist()
    if pa.types.is_floating(t):
        return [v if v is None or math.isfinite(v) else ("NaN" if math.isnan(v) else _NON_FINITE[v])
                for v in column.to_pylist()]
    return value_text(column).to_pylist()


def repair_table(root: str, name: str, s3: dict[str, str]) -> int:
    """Commit the newest complete version of a table again when its latest committed version lacks files."""
    names = _split(name)
    if names is None:
        return 2
    try:
        done = _store(root, s3).repair(*names)
    except DestinationError as exc:
        print(f"error: {exc}")
        return 1
    if done is None:
        print(f"{name}: the latest committed version is complete; nothing to repair")
        return 0
    print(f"{name}: versions {', '.join(map(str, done.incomplete))} lacked files; version {done.version} now holds "
          f"version {done.restored}'s rows. Re-sync the table: the rows written by the incomplete versions are not in it")
    return 0
