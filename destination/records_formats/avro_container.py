"""Avro's object container file (the Avro spec's "Object Container Files"): the header (magic, metadata map with
`avro.schema` and `avro.codec`, 16-byte sync marker) and the data blocks (row count, byte size, bytes, sync marker).
The codec's writer and its fast reader both hand polars a file of plain types and no compression and take one back
(avro_encode.py, avro_decode.py); this module reads and writes the frame around the rows. Written here because
fastavro's container code is interleaved with its row-by-row decoding and polars exposes none."""
from __future__ import annotations

from collections.abc import Iterable

MAGIC = b"Obj\x01"
SYNC_BYTES = 16


def read_long(raw: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at `pos`, and the position after it."""
    shift = acc = 0
    while True:
        byte = raw[pos]
        pos += 1
        acc |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (acc >> 1) ^ -(acc & 1), pos


def long_bytes(value: int) -> bytes:
    """`value` as Avro's zigzag varint."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def header(raw: bytes) -> tuple[dict[str, bytes], int]:
    """The file's metadata and where its sync marker starts (ValueError if not an Avro container file)."""
    if raw[:4] != MAGIC:
        raise ValueError("not an Avro object container file")
    pos, meta = 4, dict[str, bytes]()
    while True:
        count, pos = read_long(raw, pos)
        if count == 0:
            return meta, pos
        if count < 0:  # a block with its byte size
            _, pos = read_long(raw, pos)
            count = -count
        for _ in range(count):
            size, pos = read_long(raw, pos)
            key = raw[pos:pos + size].decode("utf-8")
            size, pos = read_long(raw, pos + size)
            meta[key], pos = raw[pos:pos + size], pos + size


def blocks(raw: bytes, sync_at: int) -> list[tuple[int, int, int]]:
    """Each data block's (row count, start, end of its bytes), after the header's sync marker at `sync_at`.
    ValueError for a block that runs past the end or does not end with the header's marker (a damaged file: fastavro
    refuses it too)."""
    sync = raw[sync_at:sync_at + SYNC_BYTES]
    found: list[tuple[int, int, int]] = []
    pos = sync_at + SYNC_BYTES
    while pos < len(raw):
        count, pos = read_long(raw, pos)
        size, pos = read_long(raw, pos)
        if size < 0 or pos + size + SYNC_BYTES > len(raw):
            raise ValueError("a block runs past the end of the file")
        if raw[pos + size:pos + size + SYNC_BYTES] != sync:
            raise ValueError(f"block {len(found) + 1} (its sync marker at byte {pos + size}) does not end with the "
                             "header's sync marker")
        found.append((count, pos, pos + size))
        pos += size + SYNC_BYTES
    return found


def container(meta: dict[str, bytes], sync: bytes, data_blocks: Iterable[tuple[int, bytes]]) -> bytes:
    """A container file of `meta`, the sync marker `sync` and the (row count, bytes) blocks."""
    parts = [MAGIC + long_bytes(len(meta))]
    for key, value in meta.items():
        parts.append(long_bytes(len(key)) + key.encode("utf-8") + long_bytes(len(value)) + value)
    parts.append(b"\x00" + sync)
    for count, data in data_blocks:
        parts.append(long_bytes(count) + long_bytes(len(data)) + data + sync)
    return b"".join(parts)
