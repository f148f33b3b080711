"""The AlterTable check task: how many stored values a type change would lose, counted in one stored file."""
from __future__ import annotations

from destination.on_disk.datafiles import align, read_data_file
from destination.on_disk.locations import file_dir
from destination.storage.opening import open_storage
from spark_jobs.alter import key_text, lost_values
from spark_jobs.contracts import CheckConversionUnit, ConversionCheck, JobContext


def check_conversion_task(ctx: JobContext, unit: CheckConversionUnit) -> ConversionCheck:
    """Count the values of the unit's columns in one stored file that the change to ctx.table would lose, with
    one row's key per column (lost_values). Writes nothing."""
    storage = open_storage(ctx.storage)
    old_def = unit.old_table
    keys = old_def.key_columns
    needed = list(dict.fromkeys([*unit.columns, *keys]))
    old = align(read_data_file(storage, file_dir(ctx.read_dir, unit.file), unit.file.name, needed), old_def.with_columns(
        [c for c in old_def.columns if c.name in needed]))
    lost = lost_values(old, old_def, ctx.table, list(unit.columns))
    return ConversionCheck(lost={name: count for name, (count, _row) in lost.items()},
                           example={name: key_text(old, row, keys) for name, (_count, row) in lost.items()})
