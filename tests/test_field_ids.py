"""Field ids (destination/model/field_ids.py): a pure function of the table definition, stable per column name while
the type stays or is promoted the way Iceberg promotes, never reused, and carried by the data file schema."""
from __future__ import annotations

import json

from destination.model.field_ids import PARQUET_FIELD_ID, assign, data_file_schema, field_ids
from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef

COLUMNS = (ColumnDef("id", "INT", True), ColumnDef("name", "STRING"), ColumnDef("amount", "DECIMAL", False, 10, 2))


def test_a_new_table_numbers_its_columns_in_order_with_the_row_metadata_last() -> None:
    table = TableDef("t", COLUMNS)
    assert field_ids(table) == {"id": 1, "name": 2, "amount": 3, DESTINATION_META: 4}
    assert assign(table).last_field_id == 4
    assert assign(assign(table)) == assign(table) and assign(assign(table)).field_ids == assign(table).field_ids


def test_ids_follow_names_and_promotions_and_are_never_reused() -> None:
    v1 = assign(TableDef("t", COLUMNS))
    # promoted (INT → LONG, STRING → JSON, a decimal widened at its scale): same ids; a column added: the next id
    v2 = assign(v1.with_columns([ColumnDef("id", "LONG", True), ColumnDef("name", "JSON"),
                                 ColumnDef("amount", "DECIMAL", False, 20, 2), ColumnDef("note", "STRING")]))
    assert field_ids(v2) == {"id": 1, "name": 2, "amount": 3, "note": 5, DESTINATION_META: 4}
    # not promotions (STRING → INT, a decimal's scale changed, LONG → INT), a rename, a drop: new ids
    v3 = assign(v2.with_columns([ColumnDef("id", "INT", True), ColumnDef("label", "STRING"),
                                 ColumnDef("amount", "DECIMAL", False, 20, 4)]))
    assert field_ids(v3) == {"id": 6, "label": 7, "amount": 8, DESTINATION_META: 4}
    v4 = assign(v3.with_columns([*v3.columns, ColumnDef("note", "STRING")]))  # re-added after its drop
    assert field_ids(v4)["note"] == 9 and v4.last_field_id == 9


def test_the_ids_survive_the_definitions_json_and_a_requested_definition_still_compares_equal() -> None:
    stored = assign(TableDef("t", COLUMNS).with_columns([*COLUMNS, ColumnDef("x", "BOOLEAN")]))
    again = TableDef.from_json(json.loads(json.dumps(stored.to_json())))
    assert again.field_ids == stored.field_ids and again.last_field_id == stored.last_field_id
    assert again == TableDef("t", (*COLUMNS, ColumnDef("x", "BOOLEAN")))  # CreateTable retries compare so


def test_the_data_file_schema_carries_each_id() -> None:
    table = assign(assign(TableDef("t", COLUMNS)).with_columns([*COLUMNS, ColumnDef("note", "STRING")]))
    schema = data_file_schema(table)
    assert schema.names == ["id", "name", "amount", "note", DESTINATION_META]
    assert [int(f.metadata[PARQUET_FIELD_ID]) for f in schema] == [1, 2, 3, 5, 4]
