"""Schema and table names longer than a path component holds, through the gRPC server on both backends."""
from __future__ import annotations

import pytest

from destination.protocol import sdk
from destination.storage.base import open_storage
from destination.table_store.store import TableStore
from tests.conftest import spec_of
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
