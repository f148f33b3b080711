"""Which AlterTable type changes keep every stored value: the one owner of the rule (docs/reference/types.md "Type changes").

WIDENINGS lists, per stored type, the types every value of it converts to and back exactly: those changes
are applied without reading the data. DECIMAL targets need at least the integer digits of the source
(`_INTEGER_DIGITS`; DECIMAL→DECIMAL: no fewer integer digits and no smaller scale). Every other change is
*checked*: a Spark job converts every stored value first (spark_jobs.alter.lost_values) and the change is
applied only if none is lost; otherwise a Task names the column, the count and one row's key, and nothing
is written. A change of the key's columns or of a key column's type re-buckets the rows and is refused when
two rows would get the same key.
"""
from __future__ import annotations

from destination.model.table_model import ColumnDef, TableDef

TEXT = ("STRING", "XML")  # targets that hold any value's text; JSON also checks that the text is JSON

WIDENINGS: dict[str, tuple[str, ...]] = {
    "BOOLEAN": TEXT,
    "SHORT": ("INT", "LONG", "FLOAT", "DOUBLE", "DECIMAL", *TEXT),
    "INT": ("LONG", "DOUBLE", "DECIMAL", *TEXT),
    "LONG": ("DECIMAL", *TEXT),
    "FLOAT": ("DOUBLE", *TEXT),
    "DOUBLE": TEXT,
    "DECIMAL": ("DECIMAL", *TEXT),
    "NAIVE_DATE": ("NAIVE_DATETIME", *TEXT),
    "NAIVE_DATETIME": TEXT,
    "UTC_DATETIME": TEXT,
    "NAIVE_TIME": TEXT,
    "BINARY": (),  # bytes that are not UTF-8 have no text: checked
    "STRING": ("XML",),
    "XML": ("STRING",),
    "JSON": TEXT,
}

_INTEGER_DIGITS = {"SHORT": 5, "INT": 10, "LONG": 19}  # digits of the type's largest value


def _integer_digits(col: ColumnDef) -> int:
    if col.type == "DECIMAL":
        return (col.precision or 0) - (col.scale or 0)
    return _INTEGER_DIGITS[col.type]


def is_widening(old: ColumnDef, new: ColumnDef) -> bool:
    """Whether every value of `old` converts to `new` and back unchanged (WIDENINGS)."""
    if new.type not in WIDENINGS.get(old.type, ()):
        return False
    if new.type != "DECIMAL":
        return True
    return _integer_digits(new) >= _integer_digits(old) and (new.scale or 0) >= (old.scale or 0)


def type_changed(old: ColumnDef, new: ColumnDef) -> bool:
    return (old.type, old.precision, old.scale) != (new.type, new.precision, new.scale)


def checked_columns(old: TableDef, new: TableDef) -> list[str]:
    """Columns of both definitions whose type changes in a way that may lose values."""
    names = []
    for col in new.columns:
        before = old.column(col.name)
        if before is not None and type_changed(before, col) and not is_widening(before, col):
            names.append(col.name)
    return names


def key_changed(old: TableDef, new: TableDef) -> bool:
    """Whether rows need new keys: other key columns, or a key column of another type (tokens and buckets
    follow the type)."""
    if set(old.key_columns) != set(new.key_columns):
        return True
    return any(type_changed(old.column(name), new.column(name))  # type: ignore[arg-type]
               for name in new.key_columns)
