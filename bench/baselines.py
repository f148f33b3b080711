"""Baselines measured in the same run as the server, written independently of the server's code:

(a) the raw decode limit: decrypt, decompress, parse and cast, and write each batch file as Parquet with pyarrow;
    one process per core over the files (the best this machine does with the same bytes), no merge;
(b) the same merges done in one process with pyarrow alone: the table's rows in memory from Parquet, the batch
    applied with vectorized Arrow operations, the whole table written back as Parquet.
Both keep their Parquet files on the storage of the server's pass they are compared with (a Place: local disk, or
the S3 server through pyarrow's S3 filesystem). They share one thing with the server: which columns are dictionary
encoded (destination.on_disk.datafiles.dictionary_columns), so both sides write the same kind of file.
"""
from __future__ import annotations

import io
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import zstandard
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from bench.batches import BatchFile
from bench.data import ACTIVE, COLUMNS, DELETED, END, KEY, START, SYNCED, system_columns
from destination.on_disk.datafiles import dictionary_columns
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING

ARROW = {"LONG": pa.int64(), "BOOLEAN": pa.bool_(), "SHORT": pa.int16(), "INT": pa.int32(), "FLOAT": pa.float32(),
         "DOUBLE": pa.float64(), "NAIVE_DATE": pa.date32(), "NAIVE_DATETIME": pa.timestamp("us"),
         "UTC_DATETIME": pa.timestamp("us", tz="UTC"), "NAIVE_TIME": pa.time64("us"), "BINARY": pa.binary(),
         "XML": pa.string(), "STRING": pa.string(), "JSON": pa.string()}
ONE_MS = 1000


def types(history: bool) -> dict[str, pa.DataType]:
    out = {name: (pa.decimal128(*params) if params else ARROW[t]) for name, t, params in COLUMNS}
    out.update({name: ARROW[t] for name, t in system_columns(history)})
    return out


def plaintext(f: BatchFile) -> bytes:
    """AES-256-CBC (IV first) then zstd, in memory (the raw decode does exactly this work)."""
    data = Path(f.path).read_bytes()
    decryptor = Cipher(algorithms.AES(f.key), modes.CBC(data[:16])).decryptor()
    padded = decryptor.update(data[16:]) + decryptor.finalize()
    compressed = padded[:-padded[-1]]
    return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(compressed)).read()


def _time_of_day(values: pa.Array) -> pa.Array:
    """Arrow has no text → time cast: parse as a timestamp on a fixed day, then keep its time of day."""
    return pc.cast(pc.binary_join_element_wise("1970-01-01T", values, ""), pa.timestamp("us")).cast(pa.time64("us"))


@dataclass
class Decoded:
    table: pa.Table  # typed columns present in the file
    unmodified: dict[str, pa.Array]


def decode(f: BatchFile, history: bool) -> Decoded:
    """One batch file → typed Arrow, markers applied (NULL marker → null, unmodified → mask)."""
    plain = plaintext(f)
    if ".parquet" in f.path:
        raw = pq.read_table(pa.BufferReader(plain))
    else:
        raw = pacsv.read_csv(io.BytesIO(plain), convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in types(history)}, null_values=[NULL_STRING],
            strings_can_be_null=True, quoted_strings_can_be_null=False))
    columns, unmodified = {}, {}
    for name, target in types(history).items():
        if name not in raw.column_names:
            continue
        values = raw.column(name).combine_chunks()
        if pa.types.is_string(values.type) or pa.types.is_binary(values.type):
            marker = pa.scalar(UNMODIFIED_STRING.encode() if pa.types.is_binary(values.type) else UNMODIFIED_STRING,
                               values.type)
            mask = pc.fill_null(pc.equal(values, marker), False)
            if pc.any(mask).as_py():
                unmodified[name] = mask
                values = pc.if_else(mask, pa.scalar(None, values.type), values)
        if values.type == target or pa.types.is_binary(target):
            columns[name] = values
        elif target == pa.time64("us"):
            columns[name] = _time_of_day(values)
        else:
            columns[name] = pc.cast(values, target)
    return Decoded(pa.table(columns), unmodified)


@dataclass(frozen=True)
class Place:
    """Where a baseline keeps its Parquet files: the same storage as the server's pass (local disk or S3)."""

    fs: pafs.FileSystem
    root: str

    def reset(self) -> None:
        self.remove()
        self.fs.create_dir(self.root)

    def remove(self) -> None:
        try:
            self.fs.delete_dir(self.root)
        except (FileNotFoundError, OSError):
            pass

    def file(self, i: int) -> str:
        return f"{self.root}/part-{i:04d}.parquet"

    @property
    def url(self) -> str:
        """The place as other tools name it: a local path, or s3://bucket/prefix."""
        return f"s3://{self.root}" if isinstance(self.fs, pafs.S3FileSystem) else self.root


def _decode_to_parquet(job: tuple[BatchFile, bool, Place, int]) -> int:
    f, history, place, i = job
    table = decode(f, history).table
    pq.write_table(table, place.file(i), compression="snappy", use_dictionary=dictionary_columns(table),
                   filesystem=place.fs)
    return table.num_rows


def raw_decode(files: list[BatchFile], history: bool, place: Place) -> float:
    """(a): seconds to turn `files` into Parquet files at `place`, one process per core."""
    place.reset()
    jobs = [(f, history, place, i) for i, f in enumerate(files) if f.kind == "replace"]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        rows = sum(pool.map(_decode_to_parquet, jobs))
    seconds = time.perf_counter() - started
    assert rows == sum(f.rows for f in files if f.kind == "replace")
    return seconds


# ---- (b) the merges in one process --------------------------------------------------------------------------

def _read_state(place: Place) -> pa.Table:
    return pq.read_table(place.root, filesystem=place.fs)


def _write_state(table: pa.Table, place: Place, parts: int = 16) -> None:
    place.reset()
    step = -(-table.num_rows // parts)
    for i in range(parts):
        part = table.slice(i * step, step)
        pq.write_table(part, place.file(i), compression="snappy", use_dictionary=dictionary_columns(part),
                       filesystem=place.fs)


def _batch(files: list[BatchFile], kind: str, history: bool) -> Decoded:
    parts = [decode(f, history) for f in files if f.kind == kind]
    table = pa.concat_tables([p.table for p in parts], promote_options="permissive")
    masks = {name: pa.concat_arrays([p.unmodified.get(name, pa.array(np.zeros(p.table.num_rows, dtype=bool)))
                                     for p in parts]) for name in {n for p in parts for n in p.unmodified}}
    return Decoded(table, masks)


def _conform(rows: pa.Table, like: pa.Schema) -> pa.Table:
    return pa.table({f.name: rows.column(f.name).cast(f.type) if f.name in rows.column_names
                     else pa.nulls(rows.num_rows, f.type) for f in like})


def _filled(batch: Decoded, stored: pa.Table, schema: pa.Schema) -> pa.Table:
    """Batch rows with unmodified columns taken from `stored` (row-aligned)."""
    rows = _conform(batch.table, schema)
    return pa.table({f.name: pc.if_else(batch.unmodified[f.name], stored.column(f.name), rows.column(f.name))
                     if f.name in batch.unmodified else rows.column(f.name) for f in schema})


def plain_merge(state_dir: Place, files: list[BatchFile], kind: str) -> float:
    """(b) for a plain table: upsert (replace), update (with unmodified columns) or delete; returns seconds."""
    started = time.perf_counter()
    state = _read_state(state_dir)
    batch = _batch(files, kind, False)
    keys = batch.table.column(KEY)
    others = state.filter(pc.invert(pc.is_in(state.column(KEY), value_set=keys)))
    if kind == "replace":
        state = pa.concat_tables([others, _conform(batch.table, state.schema)])
    elif kind == "update":
        index = pc.index_in(keys, value_set=state.column(KEY))
        present = pc.is_valid(index)
        stored = state.take(pc.drop_null(index))
        batch = Decoded(batch.table.filter(present), {n: m.filter(present) for n, m in batch.unmodified.items()})
        state = pa.concat_tables([others, _filled(batch, stored, state.schema)])
    else:
        state = others
    _write_state(state, state_dir)
    return time.perf_counter() - started


def _micros(values: pa.Array) -> pa.Array:
    return values.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())


def soft_truncate(state_dir: Place, cutoff_ms: int) -> float:
    started = time.perf_counter()
    state = _read_state(state_dir)
    synced = state.column(SYNCED).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    hit = pc.less(synced, cutoff_ms)
    state = state.set_column(state.schema.get_field_index(DELETED), DELETED,
                             pc.if_else(hit, True, state.column(DELETED)))
    _write_state(state, state_dir)
    return time.perf_counter() - started


def history_merge(state_dir: Place, files: list[BatchFile], kind: str) -> float:
    """(b) for the history table, for this benchmark's pattern (every new version starts after the stored ones):
    new versions close the key's active version 1 ms before their start; deletes close it at their end."""
    started = time.perf_counter()
    state = _read_state(state_dir)
    batch = _batch(files, kind, True)
    keys = batch.table.column(KEY)
    index = pc.index_in(state.column(KEY), value_set=keys)  # per stored row: its batch row
    closing = pc.and_(pc.is_valid(index), pc.fill_null(state.column(ACTIVE), False))
    safe = pc.fill_null(index, 0)
    if kind == "delete":
        end = _micros(pc.take(batch.table.column(END), safe))
    else:
        end = pc.subtract(_micros(pc.take(batch.table.column(START), safe)), ONE_MS)
    new_end = pc.if_else(closing, end, _micros(state.column(END))).cast(pa.timestamp("us", tz="UTC"))
    active_rows = state.filter(closing)
    state = state.set_column(state.schema.get_field_index(END), END, new_end)
    state = state.set_column(state.schema.get_field_index(ACTIVE), ACTIVE, pc.if_else(closing, False, state.column(ACTIVE)))
    if kind != "delete":
        rows = batch.table
        if kind == "update":  # unmodified columns come from the version they follow
            position = pc.index_in(keys, value_set=active_rows.column(KEY))
            present = pc.is_valid(position)
            batch = Decoded(rows.filter(present), {n: m.filter(present) for n, m in batch.unmodified.items()})
            rows = _filled(batch, active_rows.take(pc.drop_null(position)), state.schema)
        state = pa.concat_tables([state, _conform(rows, state.schema)])
    _write_state(state, state_dir)
    return time.perf_counter() - started

