"""AlterTable refuses type and key changes that would lose stored values (destination/model/type_changes.py):
through the gRPC server on both backends, plus the policy table itself."""
from __future__ import annotations

import decimal

import pytest

from destination.model.table_model import ColumnDef
from destination.model.type_changes import is_widening
from destination.protocol import sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from tests.conftest import spec_of
from tests.rpc_helpers import describe, rows_of, table
from tests.test_table_rpcs import _write_rows, create

SYNCED = ("_fivetran_synced", "UTC_DATETIME")
STAMP = "2024-01-01T00:00:00Z"


def _alter(stub, configuration, schema, t):  # type: ignore[no-untyped-def]
    return stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name=schema, table=t))


def _version(configuration: dict[str, str], schema: str, name: str) -> int:
    current = TableStore(open_storage(spec_of(configuration))).load(schema, name)
    assert current is not None
    return current.version


def _table_with_rows(stub, configuration, tmp_path, schema, columns, rows):  # type: ignore[no-untyped-def]
    t = table("t", [*columns, SYNCED])
    assert create(stub, configuration, schema, t).success
    _write_rows(stub, configuration, schema, t, [{**r, "_fivetran_synced": STAMP} for r in rows], tmp_path)
    return t


def _assert_refused(stub, configuration, schema, before, altered, *phrases):  # type: ignore[no-untyped-def]
    """The change answers a Task with `phrases`, and the table is as it was: definition, version, rows."""
    version, rows = _version(configuration, schema, "t"), rows_of(configuration, schema, "t")
    answer = _alter(stub, configuration, schema, altered)
    assert answer.WhichOneof("response") == "task", answer
    for phrase in phrases:
        assert phrase in answer.task.message, answer.task.message
    assert describe(stub, configuration, schema, "t").table == before
    assert _version(configuration, schema, "t") == version
    assert rows_of(configuration, schema, "t") == rows


def test_key_long_to_boolean_is_refused(stub, configuration, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    before = _table_with_rows(stub, configuration, tmp_path, "lossy_key", [("id", "LONG", True), ("v", "STRING")],
                              [{"id": str(i), "v": "x"} for i in range(1, 1001)])
    altered = table("t", [("id", "BOOLEAN", True), ("v", "STRING"), SYNCED])
    _assert_refused(stub, configuration, "lossy_key", before, altered,
                    "column 'id' LONG -> BOOLEAN: 999 stored values would not convert", "Example row: key id=")
    logged = capsys.readouterr().out
    assert "LONG -> BOOLEAN: 999" in logged and "key id=" not in logged  # the example key goes to the Task only


def test_string_to_int_is_refused_unless_every_value_converts(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    before = _table_with_rows(stub, configuration, tmp_path, "lossy_text", [("id", "INT", True), ("code", "STRING")],
                              [{"id": str(i), "code": f"c{i}"} for i in range(1000)])
    altered = table("t", [("id", "INT", True), ("code", "INT"), SYNCED])
    _assert_refused(stub, configuration, "lossy_text", before, altered,
                    "column 'code' STRING -> INT: 1000 stored values", "Example row: key id=")
    _write_rows(stub, configuration, "lossy_text", before, [{"id": str(i), "code": str(i * 7), "_fivetran_synced": STAMP}
                                                             for i in range(1000)], tmp_path)
    assert _alter(stub, configuration, "lossy_text", altered).WhichOneof("response") == "success"
    assert sorted((r["id"], r["code"]) for r in rows_of(configuration, "lossy_text", "t")) == [(i, i * 7) for i in range(1000)]


def test_text_to_a_number_must_keep_the_number(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    before = _table_with_rows(stub, configuration, tmp_path, "text_number", [("id", "INT", True), ("amount", "STRING")],
                              [{"id": "1", "amount": "1.5"}, {"id": "2", "amount": " 2 "}, {"id": "3", "amount": "1.234"}])
    altered = table("t", [("id", "INT", True), ("amount", "DECIMAL", False, (10, 2)), SYNCED])
    _assert_refused(stub, configuration, "text_number", before, altered,  # 1.234 would be rounded to 1.23
                    "column 'amount' STRING -> DECIMAL(10,2): 1 stored values", "Example row: key id=3")
    _write_rows(stub, configuration, "text_number", before, [{"id": "3", "amount": "1.23", "_fivetran_synced": STAMP}],
                tmp_path)
    assert _alter(stub, configuration, "text_number", altered).WhichOneof("response") == "success"
    amounts = sorted((r["id"], r["amount"]) for r in rows_of(configuration, "text_number", "t"))
    assert amounts == [(1, decimal.Decimal("1.50")), (2, decimal.Decimal("2.00")), (3, decimal.Decimal("1.23"))]


def test_decimals_are_never_narrowed(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    schema = "decimals"
    before = _table_with_rows(stub, configuration, tmp_path, schema, [("id", "INT", True), ("amount", "DECIMAL", False, (38, 10))],
                              [{"id": str(i), "amount": f"{i}.25"} for i in range(1, 1001)])
    # scale above precision: every value must be below 10^(60-70); none of these is
    _assert_refused(stub, configuration, schema, before, table("t", [("id", "INT", True), ("amount", "DECIMAL", False, (60, 70)), SYNCED]),
                    "column 'amount' DECIMAL(38,10) -> DECIMAL(60,70): 1000 stored values")
    _assert_refused(stub, configuration, schema, before, table("t", [("id", "INT", True), ("amount", "DECIMAL", False, (38, 1)), SYNCED]),
                    "DECIMAL(38,10) -> DECIMAL(38,1): 1000 stored values")
    wider = table("t", [("id", "INT", True), ("amount", "DECIMAL", False, (60, 20)), SYNCED])
    assert _alter(stub, configuration, schema, wider).WhichOneof("response") == "success"
    assert describe(stub, configuration, schema, "t").table == wider
    big = "1234567890" * 4 + ".12345678901234567890"  # 60 digits: beyond what 38 holds
    _write_rows(stub, configuration, schema, wider, [{"id": "1", "amount": big, "_fivetran_synced": STAMP}], tmp_path)
    amounts = {r["id"]: r["amount"] for r in rows_of(configuration, schema, "t")}
    assert amounts[1] == decimal.Decimal(big) and amounts[2] == decimal.Decimal("2.25")


def test_key_type_change_that_makes_keys_collide_is_refused(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    before = _table_with_rows(stub, configuration, tmp_path, "collide", [("id", "STRING", True), ("v", "STRING")],
                              [{"id": "1", "v": "a"}, {"id": "01", "v": "b"}, {"id": "2", "v": "c"}])
    altered = table("t", [("id", "INT", True), ("v", "STRING"), SYNCED])
    _assert_refused(stub, configuration, "collide", before, altered, "2 rows would share their key", "key id=1")


def test_widenings_apply_and_keep_every_value(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _table_with_rows(stub, configuration, tmp_path, "widen", [("id", "INT", True), ("n", "INT"), ("f", "FLOAT")],
                     [{"id": str(i), "n": str(-(2**31) + i), "f": "100.45"} for i in range(3)])
    wider = table("t", [("id", "LONG", True), ("n", "LONG"), ("f", "DOUBLE"), SYNCED])
    assert _alter(stub, configuration, "widen", wider).WhichOneof("response") == "success"
    got = sorted((r["id"], r["n"], r["f"]) for r in rows_of(configuration, "widen", "t"))
    assert [(i, n) for i, n, _f in got] == [(i, -(2**31) + i) for i in range(3)]
    narrower = table("t", [("id", "LONG", True), ("n", "LONG"), ("f", "FLOAT"), SYNCED])  # checked: 100.45 survives
    assert _alter(stub, configuration, "widen", narrower).WhichOneof("response") == "success"


@pytest.mark.parametrize("old, new, widening", [
    (ColumnDef("c", "INT"), ColumnDef("c", "LONG"), True),
    (ColumnDef("c", "LONG"), ColumnDef("c", "INT"), False),
    (ColumnDef("c", "LONG"), ColumnDef("c", "BOOLEAN"), False),
    (ColumnDef("c", "LONG"), ColumnDef("c", "DECIMAL", False, 19, 0), True),
    (ColumnDef("c", "LONG"), ColumnDef("c", "DECIMAL", False, 38, 20), False),
    (ColumnDef("c", "DECIMAL", False, 38, 10), ColumnDef("c", "DECIMAL", False, 60, 20), True),
    (ColumnDef("c", "DECIMAL", False, 38, 10), ColumnDef("c", "DECIMAL", False, 60, 70), False),
    (ColumnDef("c", "DOUBLE"), ColumnDef("c", "FLOAT"), False),
    (ColumnDef("c", "STRING"), ColumnDef("c", "INT"), False),
    (ColumnDef("c", "NAIVE_DATE"), ColumnDef("c", "STRING"), True),
    (ColumnDef("c", "BINARY"), ColumnDef("c", "STRING"), False),
])
def test_policy_table(old: ColumnDef, new: ColumnDef, widening: bool) -> None:
    assert is_widening(old, new) is widening
