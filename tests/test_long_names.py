"""Schema and table names longer than a path component holds, through the gRPC server on both backends."""
from __future__ import annotations

import uuid

import pytest

from destination.on_disk import layout
from destination.protocol import sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from tests.conftest import s3_configuration, spec_of
from tests.rpc_helpers import describe, rows_of, table
from tests.test_table_rpcs import _write_rows, create

COLUMNS = [("id", "INT", True), ("v", "STRING"), ("_fivetran_synced", "UTC_DATETIME")]
LONG_TABLE = "t" * 1000
CJK_TABLE = "名" * 300
LONG_SCHEMA = "s.c" * 400


@pytest.mark.parametrize("schema, name", [("long", LONG_TABLE), ("long", CJK_TABLE), (LONG_SCHEMA, "short"),
                                          (LONG_SCHEMA, CJK_TABLE)])
def test_long_names_create_write_describe_and_list(stub, configuration, tmp_path, schema, name) -> None:  # type: ignore[no-untyped-def]
    assert describe(stub, configuration, schema, name).WhichOneof("response") == "not_found"
    t = table(name, COLUMNS)
    answer = create(stub, configuration, schema, t)
    assert answer.WhichOneof("response") == "success", answer
    _write_rows(stub, configuration, schema, t, [{"id": "1", "v": "a", "_fivetran_synced": "2024-01-01T00:00:00Z"}],
                tmp_path)
    assert describe(stub, configuration, schema, name).table == t
    assert [(r["id"], r["v"]) for r in rows_of(configuration, schema, name)] == [(1, "a")]
    store = TableStore(open_storage(spec_of(configuration)))
    assert store.list_schemas() == [schema] and store.list_tables(schema) == [name]
    # a name sharing the stored one's shortened head is another table, never created
    assert describe(stub, configuration, schema, name[:-1] + "y").WhichOneof("response") == "not_found"
    answer = stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name=schema,
                                                   table=table(name, [*COLUMNS, ("extra", "LONG")])))
    assert answer.WhichOneof("response") == "success", answer


def test_a_table_s3_holds_under_its_unshortened_folder_keeps_it(stub, s3_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """S3 took folders over 255 bytes before long names were shortened: such a table stays where it is."""
    configuration = s3_configuration(s3_server, f"t-{uuid.uuid4().hex[:12]}")
    schema, name = "legacy", "名" * 100  # a 300-byte folder
    t = table(name, COLUMNS)
    assert create(stub, configuration, schema, t).success
    _write_rows(stub, configuration, schema, t, [{"id": "1", "v": "a", "_fivetran_synced": "2024-01-01T00:00:00Z"}],
                tmp_path)
    storage = open_storage(spec_of(configuration))
    shortened, unshortened = layout.table_prefix(schema, name), layout.unshortened_table_prefix(schema, name)
    for obj in storage.list_recursive(shortened):  # the table as an older server left it
        if not obj.path.endswith("/~name"):
            storage.copy(obj.path, unshortened + obj.path[len(shortened):])
    storage.delete_prefix(shortened)

    assert describe(stub, configuration, schema, name).table == t
    _write_rows(stub, configuration, schema, t, [{"id": "2", "v": "b", "_fivetran_synced": "2024-01-01T00:00:00Z"}],
                tmp_path)
    assert sorted((r["id"], r["v"]) for r in rows_of(configuration, schema, name)) == [(1, "a"), (2, "b")]
    assert not list(storage.list_recursive(shortened))
    assert TableStore(storage).list_tables(schema) == [name]
