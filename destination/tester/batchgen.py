"""Batch files as the Fivetran tester writes them: CSV (Jackson's loose quoting, shuffled header)
or Parquet (strings and bytes, as its Avro writer), then zstd, then AES-256-CBC with a random IV."""
from __future__ import annotations

import base64
import binascii
import io
import os
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

NULL_STRING = "null-m8yilkvPsNulehxl2G6pmSQ3G3WWdLP"
UNMODIFIED_STRING = "unmod-NcK9NIjPUutCsz4mjOQQztbnwnE1sY3"


def _quote(value: str) -> str:
    """Jackson's loose quoting: longer than 24 characters, empty, or any character up to ','."""
    if value == "" or len(value) > 24 or any(ord(ch) <= 44 or ch in "\r\n" for ch in value):
        return '"' + value.replace('"', '""') + '"'
    return value


def csv_bytes(columns: list[str], rows: list[dict[str, str | None]], rng: random.Random) -> bytes:
    header = list(columns)
    rng.shuffle(header)
    out = io.StringIO()
    out.write(",".join(_quote(h) for h in header) + "\n")
    for row in rows:
        cells = []
        for name in header:
            v = row.get(name)
            cells.append(NULL_STRING if v is None else _quote(v))
        out.write(",".join(cells) + "\n")
    return out.getvalue().encode("utf-8")


def parquet_bytes(columns: list[str], binary_columns: set[str], rows: list[dict[str, str | None]]) -> bytes:
    arrays = []
    for name in columns:
        values: list[Any] = [row.get(name) for row in rows]
        if name in binary_columns:  # the bytes themselves: base64 text decoded, anything else as UTF-8
            arrays.append(pa.array([None if v is None else _binary(v) for v in values], pa.binary()))
        else:
            arrays.append(pa.array(values, pa.string()))
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=columns), sink)
    return sink.getvalue()


def _binary(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text.encode("utf-8")


def seal(plain: bytes, key: bytes | None) -> bytes:
    """zstd (level -5, as the tester), then AES-256-CBC with PKCS#5 padding and the IV first."""
    compressed = zstandard.ZstdCompressor(level=-5).compress(plain)
    if key is None:
        return compressed
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(compressed) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return iv + encryptor.update(padded) + encryptor.finalize()
