"""Reversible mapping of Fivetran schema/table names to folder names.

Letters (any script), digits, `-` and `_` stay as they are; every other
character is written as `~XX` per UTF-8 byte (upper-case hex), `~` included.
So `my table.v2` → `my~20table~2Ev2`, and no name (`..`, `/`, NUL, `=`) can form a
path separator, a parent reference or a Spark `k=v` partition folder.
"""
from __future__ import annotations

import re

from destination.errors import BadRequest

_ESCAPED = re.compile(r"(?:~[0-9A-F]{2})+")


def encode_name(name: str) -> str:
    if not name:
        raise BadRequest("empty schema or table name")
    out: list[str] = []
    for ch in name:
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        else:
            out.extend(f"~{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def decode_name(folder: str) -> str:
    return _ESCAPED.sub(lambda m: bytes.fromhex(m.group(0).replace("~", "")).decode("utf-8"), folder)
