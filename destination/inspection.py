"""`tables` and `show`: read committed versions only. S3 credentials come from the
standard AWS environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)."""
from __future__ import annotations

import os

import pyarrow as pa

from destination.errors import DestinationError
from destination.storage.base import StorageSpec, open_storage
from destination.table_store.datafiles import align, read_data_file
from destination.table_store.store import TableStore


def _store(root: str, s3: dict[str, str]) -> TableStore:
    spec = StorageSpec(root=root, s3_endpoint=s3.get("s3_endpoint", ""), s3_region=s3.get("s3_region", ""),
                       access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", ""),
                       secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", ""))
    return TableStore(open_storage(spec))


def list_tables(root: str, s3: dict[str, str]) -> int:
    store = _store(root, s3)
    print(f"{'schema':<24} {'table':<32} {'version':>8} {'rows':>12} {'files':>6}")
    for schema in store.list_schemas():
        for table in store.list_tables(schema):
            current = store.load(schema, table)
            if current is None:
                continue
            print(f"{schema:<24} {table:<32} {current.version:>8} {current.rows:>12} {len(current.files):>6}")
    return 0


def show_table(root: str, name: str, version: int | None, limit: int, s3: dict[str, str]) -> int:
    if "." not in name:
        print("give the table as SCHEMA.TABLE")
        return 2
    schema, table = name.split(".", 1)
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
        parts.append(align(read_data_file(store.storage, current.directory, f.name), current.table))
    rows = pa.concat_tables(parts).slice(0, limit) if parts else None
    print(f"{name} version {current.version}: {current.rows} rows")
    if rows is not None and rows.num_rows:
        print(rows.to_pandas().to_string(max_colwidth=40))
    return 0
