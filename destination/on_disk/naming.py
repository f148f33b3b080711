"""Reversible mapping of Fivetran schema/table names to folder names.

Letters (any script), digits, `-` and `_` stay as they are; every other
character is written as `~XX` per UTF-8 byte (upper-case hex), `~` included.
So `my table.v2` → `my~20table~2Ev2`, and no name (`..`, `/`, NUL, `=`) can form a
path separator, a parent reference or a Spark `k=v` partition folder.

A folder name longer than MAX_FOLDER_BYTES (local filesystems hold at most 255
bytes per path component) is shortened: its first bytes, `~~`, then 32 hex digits
of the SHA-256 of the full name. The regular encoding never forms `~~` (a `~` is
always followed by two hex digits), so names of either kind cannot collide, and
every name that fit before keeps its folder (and a table that S3 holds under a longer
folder from before keeps it too: TableStore.table_prefix). The full name of a shortened folder
is kept in the object `<folder>/~name` (NAME_OBJECT), which no encoded name can equal.
"""
from __future__ import annotations

import hashlib
import re

from destination.runtime.errors import BadRequest

_ESCAPED = re.compile(r"(?:~[0-9A-F]{2})+")
_PARTIAL_ESCAPE = re.compile(r"~[0-9A-F]?$")
MAX_FOLDER_BYTES = 255
SHORTENED_MARK = "~~"
_DIGEST_HEX = 32  # 128 bits of SHA-256
NAME_OBJECT = "~name"


def encode_name(name: str) -> str:
    folder = escape_name(name)
    if len(folder.encode("utf-8")) <= MAX_FOLDER_BYTES:
        return folder
    return _shortened(folder, name)


def escape_name(name: str) -> str:
    """The plain encoding, of any length (what every folder was before long names were shortened)."""
    if not name:
        raise BadRequest("empty schema or table name")
    out: list[str] = []
    for ch in name:
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        else:
            out.extend(f"~{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def _shortened(folder: str, name: str) -> str:
    """The folder's head cut at a character (never inside a `~XX` escape), the mark and the name's digest."""
    budget = MAX_FOLDER_BYTES - len(SHORTENED_MARK) - _DIGEST_HEX
    head = folder.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    head = _PARTIAL_ESCAPE.sub("", head)
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_DIGEST_HEX]
    return f"{head}{SHORTENED_MARK}{digest}"


def is_shortened(folder: str) -> bool:
    """Whether `folder` is a shortened long name, whose full name is in `<folder>/~name`."""
    return SHORTENED_MARK in folder


def decode_name(folder: str) -> str:
    """The name of a folder that is not shortened (a shortened one's name is in its NAME_OBJECT)."""
    return _ESCAPED.sub(lambda m: bytes.fromhex(m.group(0).replace("~", "")).decode("utf-8"), folder)
