"""A table moved to another records format (`records-destination reformat`): every live row of its latest version
written again in the new format, committed with the definition's new format as one version through the commit
protocol. The rows are the same, value for value (`_fivetran_*` columns, history columns and `_destination_meta`
included), so the version's change files hold no events. A move the new format cannot hold every value of is
refused before anything is committed."""
from __future__ import annotations

from destination.changes.metadata import KIND_ROWS
from destination.model.table_model import TableDef
from destination.records_formats.choice import RecordsChoice
from destination.runtime.errors import TableNotFound, UserActionRequired
from destination.store.versions import PendingVersion, TableVersion, VersionTarget
from destination.write.jobs import JobRunner
from destination.write.one_step import commit_one_step
from destination.write.with_changes import CommitsWithChanges
from spark_jobs.contracts import RewriteUnit
from spark_jobs.tasks.per_file import UNHELD, reformat_file_task

OPERATION = "reformat"


def format_text(table: TableDef) -> str:
    """A table's records format as messages name it: `avro`, `delimited (bluelabs)`."""
    variant = f" ({table.records_variant})" if table.stored_format == "delimited" else ""
    return table.stored_format + variant


def same_format(a: TableDef, b: TableDef) -> bool:
    return (a.stored_format, a.records_variant, dict(a.records_hints)) == \
        (b.stored_format, b.records_variant, dict(b.records_hints))


def moved_definition(schema: str, current: TableDef, choice: RecordsChoice) -> TableDef:
    """`current` in the chosen format; UserActionRequired when it is in that format already, BadRequest naming the
    column the format cannot hold (an Avro field name, a header row)."""
    new = choice.stamp(current)
    if same_format(new, current):
        raise UserActionRequired(f"table {schema}.{current.name} is already in records format {format_text(current)}"
                                 "; nothing to move")
    return new


def move_records_format(jobs: JobRunner, commits: CommitsWithChanges, schema: str, name: str,
                choice: RecordsChoice) -> TableVersion:
    """Commit the table's next version in the chosen format (a commit by another writer meanwhile: done again on
    its version, whose definition and rows are the ones moved)."""
    def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        if base is None:
            raise TableNotFound(f"table {schema}.{name} does not exist")
        new = moved_definition(schema, base.table, choice)
        units = [RewriteUnit(file=f, old_table=base.table) for f in base.files if f.rows]
        out = jobs.run(reformat_file_task, schema, base, target, new, units,
                       f"{OPERATION} {schema}.{name} to {format_text(new)}", KIND_ROWS)
        unheld = {key[len(UNHELD):]: count for key, count in out.counts.items() if key.startswith(UNHELD)}
        if unheld:
            columns = ", ".join(f"{column!r} ({count})" for column, count in sorted(unheld.items()))
            raise UserActionRequired(f"records format {format_text(new)} cannot hold every value of {schema}.{name}: "
                                f"values of {columns} would be stored as NULL (an empty text or binary value, or "
                                "a character the variant cannot write), so nothing was changed; choose another "
                                "format or variant")
        return PendingVersion(new, out.new_files, [], {"kind": OPERATION, "from": format_text(base.table),
                                                       "to": format_text(new), "rows": out.counts.get("rows", 0)},
                              out.change_parts(KIND_ROWS))
    committed = commit_one_step(commits, schema, name, produce)
    assert committed is not None
    return committed
