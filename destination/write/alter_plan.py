"""AlterTable's and CreateTable's plain rules: the table an AlterTable asks for, a CreateTable's difference from
the existing table, and the user's reason a lossy type change is refused."""
from __future__ import annotations

from dataclasses import replace

from destination.model.table_model import ColumnDef, TableDef
from destination.model.type_mapping import normalize_column


def plan_alter(current: TableDef, requested: TableDef, drop_columns: bool) -> TableDef:
    """The table after AlterTable: types and key flags as requested, new columns appended,
    columns absent from the request kept unless drop_columns (fivetran-protocol §10.3)."""
    wanted = {c.name: normalize_column(c) for c in requested.columns}
    columns: list[ColumnDef] = []
    for col in current.columns:
        if col.name in wanted:
            columns.append(wanted[col.name])
        elif not drop_columns:  # kept, but a column absent from the full definition is not in the key
            columns.append(replace(col, primary_key=False))
    known = {c.name for c in current.columns}
    columns += [c for c in wanted.values() if c.name not in known]
    return current.with_columns(columns)


def lossy_change_text(old: TableDef, new: TableDef, lost: dict[str, int]) -> str:
    """The user's reason a type change is refused: each column, its change and how many values it would lose."""
    columns = []
    for name, count in lost.items():
        before, after = old.column(name), new.column(name)
        assert before is not None and after is not None
        columns.append(f"column {name!r} {before.ddl()} -> {after.ddl()}: {count} stored values would not convert "
                       "exactly")
    return (f"changing the type would lose values, so nothing was changed ({'; '.join(columns)}). Keep the type, "
            "or correct those values first")


def describe_difference(existing: TableDef, requested: TableDef) -> str:
    """Empty when the definitions match (a retried CreateTable), else a human-readable difference."""
    a = {c.name: normalize_column(c) for c in existing.columns}
    b = {c.name: normalize_column(c) for c in requested.columns}
    notes = []
    for name in b.keys() - a.keys():
        notes.append(f"column {name!r} is new")
    for name in a.keys() - b.keys():
        notes.append(f"column {name!r} is missing from the request")
    for name in a.keys() & b.keys():
        if a[name] != b[name]:
            notes.append(f"column {name!r} is {a[name].ddl()}{' (key)' if a[name].primary_key else ''} "
                         f"but the request says {b[name].ddl()}{' (key)' if b[name].primary_key else ''}")
    return "; ".join(sorted(notes))
