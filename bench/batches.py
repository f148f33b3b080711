"""Batch files as Fivetran writes them: CSV or Parquet (text values, binary as bytes), zstd, then AES-256-CBC.

Each file is generated, written and described (plaintext bytes, rows) in one call; its key is never written to disk.
"""
from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.data import COLUMNS
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING, seal

BINARY = {name for name, t, _p in COLUMNS if t == "BINARY"}


@dataclass(frozen=True)
class BatchFile:
    path: str
    key: bytes
    rows: int
    plain_bytes: int  # the CSV text or Parquet file before zstd and AES
    kind: str  # replace | update | delete | earliest


def _csv_field(values: pa.Array) -> pa.Array:
    """RFC 4180 minimal quoting; NULL is the null marker, unquoted (as Fivetran writes it)."""
    needs = pc.or_(pc.match_substring_regex(values, r'[,"\r\n]'), pc.equal(pc.utf8_length(values), 0))
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(values, '"', '""'), '"', "")
    return pc.fill_null(pc.if_else(needs, quoted, values), NULL_STRING)


def csv_text(table: pa.Table) -> bytes:
    """The table's text columns as CSV with a header row; the lines are joined in Arrow, not row by row."""
    fields = [_csv_field(table.column(n).combine_chunks()) for n in table.column_names]
    lines = pc.binary_join_element_wise(*fields, "\n", "") if len(fields) == 1 else \
        pc.binary_join_element_wise(pc.binary_join_element_wise(*fields, ","), "\n", "")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1]
    body = lines.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]] if len(lines) else b""
    return (",".join(table.column_names) + "\n").encode() + body


def _binary(values: pa.Array) -> pa.Array:
    """Fivetran's Parquet files carry BINARY as bytes: base64 text decoded, markers as their UTF-8 bytes. The
    values come from a pool, so each distinct text is decoded once (a hundred million rows stay fast)."""
    encoded = values.dictionary_encode()
    distinct = [None if v is None else v.encode() if v == UNMODIFIED_STRING else base64.b64decode(v)
                for v in encoded.dictionary.to_pylist()]
    return pa.array(distinct, pa.binary()).take(encoded.indices)


def _parquet(table: pa.Table) -> bytes:
    columns = []
    for name in table.column_names:
        values = table.column(name).combine_chunks()
        if name in BINARY:
            columns.append(_binary(values))
        else:
            columns.append(values)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_arrays(columns, names=table.column_names), sink)
    return sink.getvalue().to_pybytes()


def write_batch_file(directory: Path, name: str, table: pa.Table, kind: str, fmt: str, key: bytes | None = None) -> BatchFile:
    """`table`: text columns with real nulls; CSV writes them as the null marker, Parquet as nulls. `key`: the
    file's AES key (a fresh random one when not given)."""
    plain = _parquet(table) if fmt == "parquet" else csv_text(table)
    key = key or os.urandom(32)
    path = directory / f"{name}.{'parquet' if fmt == 'parquet' else 'csv'}.zstd.aes"
    path.write_bytes(seal(plain, key))
    return BatchFile(str(path), key, table.num_rows, len(plain), kind)
