"""The tester's `schema_migration` operations as AlterTable or Migrate requests (fivetran-protocol §2)."""
from __future__ import annotations

from typing import Any

from destination.protocol import common, sdk
from destination.tester.tables import TesterTable

_TYPE = common.DataType.Value


def migration_request(tables: dict[str, TesterTable], schema: str, configuration: Any, op: str,
                      spec: dict[str, Any]) -> tuple[str, Any]:
    """The request for one `schema_migration` operation; an AlterTable also updates the tester's own table in
    `tables` (the columns its later batches carry)."""
    table = spec.get("table") or spec.get("from_table") or ""
    if op in ("add_column", "change_column_data_type", "drop_column"):
        t = tables[spec["table"]]
        if op == "add_column":
            t.columns.append((spec["column"], spec["data_type"], {}))
        elif op == "change_column_data_type":
            t.columns = [(n, spec["data_type"] if n == spec["column"] else ty, p) for n, ty, p in t.columns]
        else:
            t.columns = [c for c in t.columns if c[0] != spec["column"]]
        return "alter", sdk.AlterTableRequest(configuration=configuration, schema_name=schema, table=t.proto(),
                                              drop_columns=op == "drop_column")
    details = sdk.MigrationDetails(schema=schema, table=table)
    if op == "copy_column":
        details.copy.copy_column.from_column = spec["from_column"]
        details.copy.copy_column.to_column = spec["to_column"]
    elif op in ("update_column_value", "set_column_to_null"):
        details.update_column_value.column = spec["column"]
        details.update_column_value.value = "NULL" if op == "set_column_to_null" else str(spec["value"])
    elif op == "add_column_with_default_value":
        details.add.add_column_with_default_value.column = spec["column"]
        details.add.add_column_with_default_value.column_type = _TYPE(spec["data_type"])
        details.add.add_column_with_default_value.default_value = str(spec["default_value"])
    elif op == "copy_table":
        details.copy.copy_table.from_table = spec["from_table"]
        details.copy.copy_table.to_table = spec["to_table"]
    elif op == "rename_column":
        details.rename.rename_column.from_column = spec["from_column"]
        details.rename.rename_column.to_column = spec["to_column"]
    elif op == "rename_table":
        details.rename.rename_table.from_table = spec["from_table"]
        details.rename.rename_table.to_table = spec["to_table"]
    elif op == "drop_table":
        details.drop.drop_table = True
    elif op == "add_column_in_history_mode":
        a = details.add.add_column_in_history_mode
        a.column, a.column_type = spec["column"], _TYPE(spec["data_type"])
        a.default_value, a.operation_timestamp = str(spec["default_value"]), spec["operation_timestamp"]
    elif op == "drop_column_in_history_mode":
        d = details.drop.drop_column_in_history_mode
        d.column, d.operation_timestamp = spec["column"], spec["operation_timestamp"]
    elif op == "copy_table_to_history_mode":
        c = details.copy.copy_table_to_history_mode
        c.from_table, c.to_table = spec["from_table"], spec["to_table"]
        c.soft_deleted_column = spec.get("deleted_column", "_fivetran_deleted")
    elif op in ("migrate_soft_delete_to_history", "migrate_history_to_soft_delete"):
        m = details.table_sync_mode_migration
        m.type = sdk.TableSyncModeMigrationType.Value(
            "SOFT_DELETE_TO_HISTORY" if op == "migrate_soft_delete_to_history" else "HISTORY_TO_SOFT_DELETE")
        m.soft_deleted_column = spec.get("deleted_column", "_fivetran_deleted")
    else:
        return "unknown", None
    return "migrate", sdk.MigrateRequest(configuration=configuration, details=details)
