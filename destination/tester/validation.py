"""Check a destination-tester input file before any call: every mistake (an unknown column type, operation, key or
table) is named by its JSON path with the values that are known, so a typo never becomes a traceback or a skipped
operation (fivetran-protocol §2 is the format)."""
from __future__ import annotations

from typing import Any

from destination.model.table_model import FIVETRAN_ID
from destination.protocol import common

SECTIONS = ("create_table", "alter_table", "ops", "schema_migration", "describe_table")
ROW_OPS = ("upsert", "update", "delete", "soft_delete")
TRUNCATE_OPS = ("truncate_before", "soft_truncate_before")
TABLE_FIELDS = ("columns", "primary_key", "history_mode")
COLUMN_FIELDS = ("type", "precision", "scale", "string_byte_length")
ROW_EXTRAS = (FIVETRAN_ID, "op_time")  # row fields beside the table's columns
DATA_TYPES = tuple(v.name for v in common.DataType.DESCRIPTOR.values if v.name != "UNSPECIFIED")
# schema_migration operations: (required fields, optional fields), as destination.tester.migration_requests reads them
MIGRATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "add_column": (("table", "column", "data_type"), ()),
    "change_column_data_type": (("table", "column", "data_type"), ()),
    "drop_column": (("table", "column"), ()),
    "copy_column": (("table", "from_column", "to_column"), ()),
    "update_column_value": (("table", "column", "value"), ()),
    "set_column_to_null": (("table", "column"), ()),
    "add_column_with_default_value": (("table", "column", "data_type", "default_value"), ()),
    "copy_table": (("from_table", "to_table"), ()),
    "rename_column": (("table", "from_column", "to_column"), ()),
    "rename_table": (("from_table", "to_table"), ()),
    "drop_table": (("table",), ()),
    "add_column_in_history_mode": (("table", "column", "data_type", "default_value", "operation_timestamp"), ()),
    "drop_column_in_history_mode": (("table", "column", "operation_timestamp"), ()),
    "copy_table_to_history_mode": (("from_table", "to_table"), ("deleted_column",)),
    "migrate_soft_delete_to_history": (("table",), ("deleted_column",)),
    "migrate_history_to_soft_delete": (("table",), ("deleted_column",)),
}


def _known(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(values)


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.columns: dict[str, list[str]] = {}  # the tables this file defines: their columns

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def keys(self, path: str, value: dict[str, Any], known: tuple[str, ...], what: str) -> None:
        for key in value:
            if key not in known:
                self.problem(f"{path}.{key}" if path else key, f"unknown {what} {key!r}; the known ones are "
                                                                f"{_known(known)}")

    def is_type(self, path: str, value: Any, kind: type, shape: str) -> bool:
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return True
        self.problem(path, f"expected {shape}, found {type(value).__name__} {value!r}"[:300])
        return False

    def data_type(self, path: str, value: Any) -> None:
        if value not in DATA_TYPES:
            self.problem(path, f"unknown column type {value!r}; the types are {_known(DATA_TYPES)}")

    def tables(self, section: str, value: Any) -> None:
        if not self.is_type(section, value, dict, "an object of table definitions"):
            return
        for name, spec in value.items():
            path = f"{section}.{name}"
            if not self.is_type(path, spec, dict, "a table definition (columns, primary_key, history_mode)"):
                continue
            self.keys(path, spec, TABLE_FIELDS, "table field")
            columns = spec.get("columns", {})
            if self.is_type(f"{path}.columns", columns, dict, "an object of column: TYPE"):
                for column, ctype in columns.items():
                    self.column(f"{path}.columns.{column}", ctype)
                self.columns[name] = list(columns)
            keys = spec.get("primary_key", [])
            if self.is_type(f"{path}.primary_key", keys, list, "a list of column names"):
                for i, key in enumerate(keys):
                    if key not in self.columns.get(name, []):
                        self.problem(f"{path}.primary_key[{i}]", f"{key!r} is not a column of the table; its "
                                                                f"columns are {_known(self.columns.get(name, []))}")
            if "history_mode" in spec:
                self.is_type(f"{path}.history_mode", spec["history_mode"], bool, "true or false")

    def column(self, path: str, ctype: Any) -> None:
        if isinstance(ctype, dict):
            self.keys(path, ctype, COLUMN_FIELDS, "column field")
            if "type" not in ctype:
                self.problem(path, "a column written as an object needs its \"type\"")
                return
            self.data_type(f"{path}.type", ctype["type"])
        else:
            self.data_type(path, ctype)

    def ops(self, value: Any) -> None:
        if not self.is_type("ops", value, list, "a list of operations"):
            return
        known = ROW_OPS + TRUNCATE_OPS
        for i, op in enumerate(value):
            path = f"ops[{i}]"
            if not self.is_type(path, op, dict, "an object with one operation"):
                continue
            if len(op) != 1:
                self.problem(path, f"expected exactly one operation, found {len(op)}: {_known(list(op))}")
                continue
            ((kind, body),) = op.items()
            if kind not in known:
                self.problem(f"{path}.{kind}", f"unknown operation {kind!r}; the operations are {_known(known)}")
            elif kind in TRUNCATE_OPS:
                if self.is_type(f"{path}.{kind}", body, list, "a list of table names"):
                    for j, table in enumerate(body):
                        self.is_type(f"{path}.{kind}[{j}]", table, str, "a table name")
            else:
                self.rows(f"{path}.{kind}", body)

    def rows(self, path: str, body: Any) -> None:
        if not self.is_type(path, body, dict, "an object of table: [rows]"):
            return
        for table, rows in body.items():
            if table not in self.columns:
                self.problem(f"{path}.{table}", f"table {table!r} is not defined by this file's create_table or "
                                                f"alter_table; they define {_known(list(self.columns)) or 'none'}")
                continue
            if not self.is_type(f"{path}.{table}", rows, list, "a list of rows"):
                continue
            allowed = (*self.columns[table], *ROW_EXTRAS)
            for j, row in enumerate(rows):
                if self.is_type(f"{path}.{table}[{j}]", row, dict, "a row object"):
                    self.keys(f"{path}.{table}[{j}]", row, allowed, "column")

    def migrations(self, value: Any) -> None:
        if not self.is_type("schema_migration", value, list, "a list of {operation: [specs]}"):
            return
        for i, element in enumerate(value):
            path = f"schema_migration[{i}]"
            if not self.is_type(path, element, dict, "an object of operation: [specs]"):
                continue
            for op, specs in element.items():
                if op not in MIGRATIONS:
                    self.problem(f"{path}.{op}", f"unknown schema_migration operation {op!r}; the operations are "
                                                 f"{_known(list(MIGRATIONS))}")
                elif self.is_type(f"{path}.{op}", specs, list, "a list of specs"):
                    for j, spec in enumerate(specs):
                        self.migration(f"{path}.{op}[{j}]", op, spec)

    def migration(self, path: str, op: str, spec: Any) -> None:
        if not self.is_type(path, spec, dict, "an object"):
            return
        required, optional = MIGRATIONS[op]
        self.keys(path, spec, required + optional, "field")
        for name in required:
            if name not in spec:
                self.problem(path, f"{op} needs the field {name!r} ({_known(required)})")
        if "data_type" in spec:
            self.data_type(f"{path}.data_type", spec["data_type"])

    def describe(self, value: Any) -> None:
        if self.is_type("describe_table", value, list, "a list of table names"):
            for i, name in enumerate(value):
                self.is_type(f"describe_table[{i}]", name, str, "a table name")


def input_problems(data: Any) -> list[str]:
    """Each mistake of an input file's JSON as "path: what is wrong; what is known" (none: the file is usable)."""
    checker = _Checker()
    if not checker.is_type("(the file)", data, dict, "a JSON object with " + _known(SECTIONS)):
        return checker.problems
    checker.keys("", data, SECTIONS, "section")
    for section in ("create_table", "alter_table"):
        if data.get(section) is not None:
            checker.tables(section, data[section])
    if data.get("ops") is not None:
        checker.ops(data["ops"])
    if data.get("schema_migration") is not None:
        checker.migrations(data["schema_migration"])
    if data.get("describe_table") is not None:
        checker.describe(data["describe_table"])
    return checker.problems
