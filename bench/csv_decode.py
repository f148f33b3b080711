"""Initial-load decode throughput of one CSV batch file (not a test): the benchmark's 20-column table as the
tester writes it (zstd, AES), decoded by destination.batch_files.reader as the write path does, best of a few runs.

    python -m bench.csv_decode [--mb 120] [--runs 3]

Run it against two trees (PYTHONPATH) to compare a change of the reader with what it replaces.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from bench.batches import csv_text
from bench.data import COLUMNS, Pools, column_names, plain_rows, system_columns, text_table
from destination.batch_files.reader import FileFormat, iter_batch_file
from destination.model.table_model import ColumnDef
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING, seal

FMT = FileFormat(encrypted=True, compression="ZSTD", null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)


def definition() -> list[ColumnDef]:
    columns = [ColumnDef(name, kind, name == "id", *(params or ())) for name, kind, params in COLUMNS]
    return columns + [ColumnDef(name, kind) for name, kind in system_columns(False)]


def plaintext(megabytes: int) -> bytes:
    """About `megabytes` MB of the initial load's CSV text."""
    pools = Pools.make()
    rows = 100_000
    sample = csv_text(text_table(plain_rows(np.arange(rows), 0, pools, "2024-01-01T00:00:00Z"), column_names(False)))
    total = max(rows, int(megabytes * 1e6 / (len(sample) / rows)))
    return csv_text(text_table(plain_rows(np.arange(total), 0, pools, "2024-01-01T00:00:00Z"), column_names(False)))


def decode_seconds(path: str, key: bytes, columns: list[ColumnDef]) -> tuple[float, float, int]:
    """Wall and CPU seconds (all threads of the process: a busy machine stretches the first far more) and rows."""
    start, cpu = time.perf_counter(), time.process_time()
    rows = sum(block.table.num_rows for block in iter_batch_file(path, columns, FMT, key, ["id"]))
    return time.perf_counter() - start, time.process_time() - cpu, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=120)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    plain = plaintext(args.mb)
    key = os.urandom(32)
    columns = definition()
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "load.csv.zstd.aes")
        with open(path, "wb") as out:
            out.write(seal(plain, key))
        timings = [decode_seconds(path, key, columns) for _ in range(args.runs)]
    best = min(wall for wall, _cpu, _rows in timings)
    best_cpu = min(cpu for _wall, cpu, _rows in timings)
    print(f"{len(plain) / 1e6:.0f} MB plaintext, {timings[0][2]} rows: best {best:.2f}s = "
          f"{len(plain) / 1e6 / best:.1f} MB/s, best CPU {best_cpu:.2f}s = {len(plain) / 1e6 / best_cpu:.1f} MB/s "
          f"(wall: {', '.join(f'{w:.2f}' for w, _c, _r in timings)})")


if __name__ == "__main__":
    main()
