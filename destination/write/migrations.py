"""Migrate: every schema-migration operation (fivetran-protocol §5 "Migrate", §10.6), dispatched here;
the table and column operations live here, the history-mode and sync-mode ones in history_migrations.py.

Each operation commits one new version through the table store; a table copy or rename creates the
target's first version from the source's files (server-side copies), and a retried operation ends in the
same state. The LIVE sync-mode migrations answer `unsupported` (Fivetran has not released live mode to
partner destinations).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from destination.model.table_model import DELETED, ColumnDef, TableDef
from destination.model.type_mapping import normalize_column
from destination.runtime.errors import BadRequest, TableNotFound, UserActionRequired
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion
from destination.write import history_migrations as history
from destination.write.table_definitions import TableDefinitions

NULL_VALUE = "NULL"


@dataclass(frozen=True)
class MigrationOutcome:
    supported: bool
    detail: str


def migrate(store: TableStore, tables: TableDefinitions, schema: str, table: str, details: Any,
            type_name: Any) -> MigrationOutcome:
    """details: a fivetran_sdk.v2 MigrationDetails; type_name maps a DataType enum number to its name. The store
    loads and drops tables; `tables` commits the operations' versions."""
    op = details.WhichOneof("operation")
    if op == "drop":
        if details.drop.WhichOneof("entity") == "drop_table":
            store.drop(schema, table)
            return MigrationOutcome(True, "table dropped")
        d = details.drop.drop_column_in_history_mode
        return MigrationOutcome(True, history.drop_column_in_history_mode(store, tables, schema, table, d.column,
                                                                          d.operation_timestamp))
    if op == "rename":
        which = details.rename.WhichOneof("entity")
        if which == "rename_table":
            r = details.rename.rename_table
            return _rename_table(store, tables, schema, r.from_table or table, r.to_table)
        r = details.rename.rename_column
        return _rewrite(store, tables, schema, table, lambda t: _renamed(t, r.from_column, r.to_column),
                        sources={r.to_column: r.from_column}, what=f"column {r.from_column!r} renamed to {r.to_column!r}")
    if op == "copy":
        which = details.copy.WhichOneof("entity")
        if which == "copy_table":
            c = details.copy.copy_table
            return _copy_table(tables, schema, c.from_table or table, c.to_table)
        if which == "copy_column":
            c = details.copy.copy_column
            return _rewrite(store, tables, schema, table, lambda t: _with_copy(t, c.from_column, c.to_column),
                            sources={c.to_column: c.from_column}, what=f"column {c.from_column!r} copied to {c.to_column!r}")
        c = details.copy.copy_table_to_history_mode
        return MigrationOutcome(True, history.copy_table_to_history_mode(
            store, tables, schema, c.from_table or table, c.to_table, c.soft_deleted_column or DELETED))
    if op == "add" and details.add.WhichOneof("entity") == "add_column_in_history_mode":
        h = details.add.add_column_in_history_mode
        column = ColumnDef(h.column, type_name(h.column_type))
        return MigrationOutcome(True, history.add_column_in_history_mode(store, tables, schema, table, column,
                                                                         _value(h.default_value), h.operation_timestamp))
    if op == "add":
        a = details.add.add_column_with_default_value
        column = normalize_column(ColumnDef(a.column, type_name(a.column_type)))
        return _rewrite(store, tables, schema, table, lambda t: _with_column(t, column),
                        constants={a.column: _value(a.default_value)}, what=f"column {a.column!r} set to its default")
    if op == "update_column_value":
        u = details.update_column_value

        def same(t: TableDef) -> TableDef:
            if t.column(u.column) is None:
                raise BadRequest(f"no column {u.column!r} in table {t.name!r}")
            return t
        return _rewrite(store, tables, schema, table, same, constants={u.column: _value(u.value)},
                        what=f"column {u.column!r} updated on every row")
    if op == "table_sync_mode_migration":
        return _sync_mode(store, tables, schema, table, details.table_sync_mode_migration)
    return MigrationOutcome(False, f"unknown migration operation {op!r}")


def _sync_mode(store: TableStore, tables: TableDefinitions, schema: str, table: str, m: Any) -> MigrationOutcome:
    kind = type(m).DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number[m.type].name
    deleted = m.soft_deleted_column or DELETED
    if kind == "SOFT_DELETE_TO_HISTORY":
        return MigrationOutcome(True, history.soft_delete_to_history(store, tables, schema, table, deleted))
    if kind == "HISTORY_TO_SOFT_DELETE":
        # fivetran-protocol §10.6: deleted keys are removed only when keep_deleted_rows is explicitly false
        keep = not (m.HasField("keep_deleted_rows") and not m.keep_deleted_rows)
        return MigrationOutcome(True, history.history_to_soft_delete(store, tables, schema, table, deleted, keep))
    return MigrationOutcome(False, f"sync-mode migration {kind} is not supported: live mode is not available to "
                                   "partner destinations")


def migration_target(details: Any) -> str | None:
    """The table a copy or rename writes besides `details.table` (None for other operations)."""
    op = details.WhichOneof("operation")
    if op in ("copy", "rename"):
        holder = getattr(details, op)
        entity = holder.WhichOneof("entity")
        if entity in ("copy_table", "rename_table", "copy_table_to_history_mode"):
            return str(getattr(holder, entity).to_table)
    return None


def _value(text: str) -> str | None:
    return None if text == NULL_VALUE else text


def _load(store: TableStore, schema: str, table: str) -> TableVersion:
    current = store.load(schema, table)
    if current is None:
        raise TableNotFound(f"table {schema}.{table} does not exist")
    return current


def _rewrite(store: TableStore, tables: TableDefinitions, schema: str, table: str, change: Any, *, what: str,
             sources: dict[str, str] | None = None, constants: dict[str, str | None] | None = None) -> MigrationOutcome:
    current = _load(store, schema, table)
    new = change(current.table)
    # a retry after a rename finds the source column gone: nothing is taken from it again
    live_sources = {k: v for k, v in (sources or {}).items() if current.table.column(v) is not None}
    if new == current.table and not live_sources and not constants:
        return MigrationOutcome(True, f"{what}: already done (version {current.version})")
    committed = tables.rewrite_all(schema, new, "migrate", sources=live_sources, constants=constants)
    return MigrationOutcome(True, f"{what}: version {committed.version if committed else current.version}")


def _renamed(t: TableDef, old: str, new: str) -> TableDef:
    if t.column(old) is None:
        if t.column(new) is not None:
            return t  # a retry after the rename landed
        raise BadRequest(f"no column {old!r} in table {t.name!r}")
    if t.column(new) is not None:
        raise UserActionRequired(f"cannot rename {old!r}: table {t.name!r} already has a column {new!r}")
    return t.with_columns([replace(c, name=new) if c.name == old else c for c in t.columns])


def _with_copy(t: TableDef, source: str, target: str) -> TableDef:
    col = t.column(source)
    if col is None:
        raise BadRequest(f"no column {source!r} in table {t.name!r}")
    if t.column(target) is not None:
        return t  # a retry: the values are copied again over the same column
    return t.with_columns([*t.columns, replace(col, name=target, primary_key=False)])


def _with_column(t: TableDef, column: ColumnDef) -> TableDef:
    return t if t.column(column.name) is not None else t.with_columns([*t.columns, column])


def _copy_table(tables: TableDefinitions, schema: str, source: str, target: str) -> MigrationOutcome:
    """A new table with the source's definition and data. An existing target (an earlier try) gets a new version
    holding the copy, so a copy that fails leaves it as it was."""
    committed = tables.copy_table(schema, source, target)
    return MigrationOutcome(True, f"copied to {target!r} as version {committed.version if committed else '?'}")


def _rename_table(store: TableStore, tables: TableDefinitions, schema: str, source: str, target: str) -> MigrationOutcome:
    """Copy, then drop the source. A retry after the copy landed finds the source gone and the target there."""
    if store.load(schema, source) is None and store.load(schema, target) is not None:
        return MigrationOutcome(True, f"already renamed to {target!r}")
    outcome = _copy_table(tables, schema, source, target)
    store.drop(schema, source)
    return MigrationOutcome(True, f"renamed to {target!r} ({outcome.detail})")
