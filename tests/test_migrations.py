"""Migrate's table and column operations: each with data, on an empty table, retried, and with an invalid default
(history-mode and sync-mode operations: test_history_migrations.py)."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from destination.on_disk.datafiles import read_data_file
from destination.on_disk.locations import file_dir
from destination.protocol import common, sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from tests.conftest import spec_of
from tests.rpc_helpers import describe, rows_of, table
from tests.test_write_path import SYS, create, write

T = table("m", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])


def row(i: int, v: str) -> dict[str, str]:
    return {"id": str(i), "v": v, "n": str(i * 10), "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}


def migrate(stub, configuration, table_name: str, **fill):  # type: ignore[no-untyped-def]
    details = sdk.MigrationDetails(schema="mig", table=table_name)
    for path, value in fill.items():
        target = details
        parts = path.split("__")
        for p in parts[:-1]:
            target = getattr(target, p)
        setattr(target, parts[-1], value)
    answer = stub.Migrate(sdk.MigrateRequest(configuration=configuration, details=details))
    return answer


@pytest.fixture(params=["with data", "empty"])
def source(request, stub, configuration, tmp_path):  # type: ignore[no-untyped-def]
    create(stub, configuration, "mig", T)
    if request.param == "with data":
        write(stub, configuration, "mig", T, tmp_path, replace=[row(1, "a"), row(2, "b")])
    return request.param == "with data"


def ids_values(configuration, name, column="v"):  # type: ignore[no-untyped-def]
    return sorted((r["id"], r[column]) for r in rows_of(configuration, "mig", name))


def column_by_id(configuration, column: str) -> dict[int, object]:  # type: ignore[no-untyped-def]
    return {r["id"]: r[column] for r in rows_of(configuration, "mig", "m")}


def expected_column(with_data: bool, value: object) -> dict[int, object]:
    """Every row of the source fixture (ids 1 and 2, or none) holding `value`."""
    return {i: value for i in (1, 2)} if with_data else {}


def test_copy_and_rename_table_with_retries(stub, configuration, source) -> None:  # type: ignore[no-untyped-def]
    expected = [(1, "a"), (2, "b")] if source else []
    for _ in range(2):  # the second call is a retry onto the existing target
        assert migrate(stub, configuration, "m", copy__copy_table__from_table="m", copy__copy_table__to_table="m copy").success
        assert ids_values(configuration, "m copy") == expected
    assert describe(stub, configuration, "mig", "m copy").table.columns == T.columns
    for _ in range(2):
        assert migrate(stub, configuration, "m copy", rename__rename_table__from_table="m copy",
                       rename__rename_table__to_table="renamed").success
    assert describe(stub, configuration, "mig", "m copy").not_found
    assert ids_values(configuration, "renamed") == expected
    assert ids_values(configuration, "m") == expected  # the source of the copy is untouched
    for _ in range(2):
        assert migrate(stub, configuration, "renamed", drop__drop_table=True).success
    assert describe(stub, configuration, "mig", "renamed").not_found


def test_rename_and_copy_column(stub, configuration, source) -> None:  # type: ignore[no-untyped-def]
    for _ in range(2):
        assert migrate(stub, configuration, "m", rename__rename_column__from_column="v",
                       rename__rename_column__to_column="v2").success
    names = [c.name for c in describe(stub, configuration, "mig", "m").table.columns]
    assert "v" not in names and names[1] == "v2"
    for _ in range(2):
        assert migrate(stub, configuration, "m", copy__copy_column__from_column="n", copy__copy_column__to_column="n copy").success
    got = rows_of(configuration, "mig", "m")
    assert all(r["n copy"] == r["n"] for r in got) and len(got) == (2 if source else 0)
    assert sorted(r["v2"] for r in got) == (["a", "b"] if source else [])
    cols = {c.name: c for c in describe(stub, configuration, "mig", "m").table.columns}
    assert cols["n copy"].type == common.DataType.Value("LONG") and not cols["n copy"].primary_key


def test_add_column_with_default_and_update_value(stub, configuration, source) -> None:  # type: ignore[no-untyped-def]
    for _ in range(2):
        answer = migrate(stub, configuration, "m", add__add_column_with_default_value__column="since",
                         add__add_column_with_default_value__column_type=common.DataType.Value("UTC_DATETIME"),
                         add__add_column_with_default_value__default_value="2005-05-28T20:57:00Z")
        assert answer.success
    since = dt.datetime(2005, 5, 28, 20, 57, tzinfo=dt.UTC)
    assert column_by_id(configuration, "since") == expected_column(source, since)
    # on an existing column the default is set on every row
    assert migrate(stub, configuration, "m", add__add_column_with_default_value__column="v",
                   add__add_column_with_default_value__column_type=common.DataType.Value("STRING"),
                   add__add_column_with_default_value__default_value="dflt").success
    assert column_by_id(configuration, "v") == expected_column(source, "dflt")
    assert migrate(stub, configuration, "m", update_column_value__column="n", update_column_value__value="202").success
    assert column_by_id(configuration, "n") == expected_column(source, 202)
    assert migrate(stub, configuration, "m", update_column_value__column="n", update_column_value__value="NULL").success
    assert column_by_id(configuration, "n") == expected_column(source, None)


def test_invalid_default_is_captured_not_fatal(stub, configuration, source) -> None:  # type: ignore[no-untyped-def]
    answer = migrate(stub, configuration, "m", add__add_column_with_default_value__column="when",
                     add__add_column_with_default_value__column_type=common.DataType.Value("NAIVE_DATE"),
                     add__add_column_with_default_value__default_value="not a date")
    assert answer.success
    got = rows_of(configuration, "mig", "m")
    assert sorted(r["id"] for r in got) == ([1, 2] if source else [])
    for r in got:
        assert r["when"] is None
        assert {"field": "when", "change": "NULLED", "reason": "DESTINATION_SERIALIZATION_ERROR"} in \
            json.loads(r["_destination_meta"])["changes"]
    assert "when" in [c.name for c in describe(stub, configuration, "mig", "m").table.columns]


def test_missing_table_is_a_task(stub, configuration) -> None:  # type: ignore[no-untyped-def]
    answer = migrate(stub, configuration, "ghost", update_column_value__column="n", update_column_value__value="1")
    assert answer.WhichOneof("response") == "task" and "does not exist" in answer.task.message


def test_a_merge_after_copy_and_rename_reads_none_of_the_copied_files(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The copied files keep their key ranges (`_files.json`): a later merge of keys outside them skips every
    copied file unread. Each copied file is overwritten with bytes no reader could parse, so the write succeeds
    only if it reads none of them."""
    create(stub, configuration, "mig", T)
    write(stub, configuration, "mig", T, tmp_path, replace=[row(i, "old") for i in range(1, 201)])
    assert migrate(stub, configuration, "m", copy__copy_table__from_table="m", copy__copy_table__to_table="m copy").success
    assert migrate(stub, configuration, "m copy", rename__rename_table__from_table="m copy",
                   rename__rename_table__to_table="renamed").success
    store = TableStore(open_storage(spec_of(configuration)))
    copied = store.load("mig", "renamed")
    assert copied is not None and copied.rows == 200
    assert all(f.key_range == {"id": [min(ids), max(ids)]} for f, ids in _ids_by_file(store, copied))
    for f in copied.files:
        store.storage.write_bytes(f"{file_dir(copied.directory, f)}/{f.name}", b"not a Parquet file")

    renamed = table("renamed", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    write(stub, configuration, "mig", renamed, tmp_path, replace=[row(i, "new") for i in range(1000, 1010)])
    after = store.load("mig", "renamed")
    assert after is not None and after.rows == 210
    carried = {f.name for f in copied.files}
    assert carried <= {f.name for f in after.files}, "every copied file is carried into the new version unread"
    new_files = [f for f in after.files if f.name not in carried]
    new_ids = sorted(i for f in new_files for i in read_data_file(store.storage, file_dir(after.directory, f), f.name)
                     .column("id").to_pylist())
    assert new_ids == list(range(1000, 1010))


def _ids_by_file(store, version):  # type: ignore[no-untyped-def]
    return [(f, read_data_file(store.storage, file_dir(version.directory, f), f.name).column("id").to_pylist()) for f in version.files]
