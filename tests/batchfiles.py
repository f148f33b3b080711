"""Helpers that write batch files the way the tester does (reusing the harness's writer)."""
from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

from destination.batch_files.reader import FileFormat
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING, csv_bytes, parquet_bytes, seal

FMT = FileFormat(encrypted=True, compression="ZSTD", null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)
PLAIN = FileFormat(encrypted=False, compression="OFF", null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)


def write_csv(path: Path, columns: list[str], rows: list[dict], key: bytes | None = None,
              compression: str = "zstd") -> Path:
    plain = csv_bytes(columns, rows, random.Random(1))
    if compression == "gzip":
        data = gzip.compress(plain)
        if key is not None:
            data = seal_raw(data, key)
    elif key is None and compression == "off":
        data = plain
    else:
        data = seal(plain, key)
    path.write_bytes(data)
    return path


def write_parquet(path: Path, columns: list[str], rows: list[dict], binary: set[str], key: bytes) -> Path:
    path.write_bytes(seal(parquet_bytes(columns, binary, rows), key))
    return path


def seal_raw(data: bytes, key: bytes) -> bytes:
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return iv + enc.update(padder.update(data) + padder.finalize()) + enc.finalize()
