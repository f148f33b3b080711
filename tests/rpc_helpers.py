"""Building requests and reading tables back, for tests that go through the gRPC server."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from destination.commands.validator import validate_version
from destination.on_disk.datafiles import align, read_data_file
from destination.on_disk.locations import file_dir
from destination.protocol import common, sdk
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.tester.harness import Harness
from tests.conftest import spec_of


def table(name: str, columns: list[tuple], history: bool = False) -> common.Table:
    """columns: (name, TYPE[, primary_key[, (precision, scale)]])"""
    t = common.Table(name=name)
    for col in columns:
        c = t.columns.add(name=col[0], type=common.DataType.Value(col[1]), primary_key=bool(col[2]) if len(col) > 2 else False)
        if len(col) > 3 and col[3]:
            c.params.decimal.precision, c.params.decimal.scale = col[3]
    return t


def rows_of(configuration: dict[str, str], schema: str, name: str, validate: bool = True) -> list[dict[str, Any]]:
    store = TableStore(open_storage(spec_of(configuration)))
    current = store.load(schema, name)
    assert current is not None, f"{schema}.{name} does not exist"
    if validate:
        assert validate_version(store.storage, current.directory) == []
    parts = [align(read_data_file(store.storage, file_dir(current.directory, f), f.name), current.table) for f in current.files]
    return pa.concat_tables(parts).to_pylist() if parts else []


def describe(stub: Any, configuration: dict[str, str], schema: str, name: str) -> Any:
    return stub.DescribeTable(sdk.DescribeTableRequest(configuration=configuration, schema_name=schema, table_name=name))


@dataclass
class TesterRun:
    """What one tester input file wrote through a server: its root's storage, a store over it, the schema's tables."""

    storage: Storage
    store: TableStore
    names: list[str]


def run_tester_input(address: str, configuration: dict[str, str], path: Path, workdir: Path,
                     schema: str = "tester") -> TesterRun:
    """Run the tester input `path` against the server at `address` (every call must succeed) and list its tables."""
    harness = Harness(address, schema, configuration, plain_text=False, batch_file_type="csv", workdir=workdir)
    harness.run_file(path)
    assert harness.failures == 0
    storage = open_storage(spec_of(configuration))
    store = TableStore(storage)
    names = store.list_tables(schema)
    assert names
    return TesterRun(storage, store, names)
