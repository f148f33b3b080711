"""Pure path builders for the on-disk layout (a public contract, docs/reference/on-disk-format.md).

    <root>/<S>/<T>/_latest                       {"version": N, "directory": "v…", "committed_at": …}
    <root>/<S>/<T>/_log/<20-digit N>.json        commit record, created if absent (the commit point)
    <root>/<S>/<T>/_log/<20-digit N>.claim       the writer preparing version N (removed on commit)
    <root>/<S>/<T>/_log/<20-digit N>.claim.<k>   the k-th takeover of that claim (the highest k holds it)
    <root>/<S>/<T>/_log/_pruned.json             {"first_record": F, "deleting_from": D}: versions before F were
                                                 committed and retired, their records pruned (records from D on may
                                                 still be there)
    <root>/<S>/<T>/v<20-digit N>/                a complete records directory
    <root>/<S>/<T>/changes/v<20-digit N>/        the changes of version N (itself a records directory)
    <root>/<S>/~name, <root>/<S>/<T>/~name       the full name, for a folder shortened by naming.encode_name
"""
from __future__ import annotations

import re
import uuid

from destination.on_disk.naming import NAME_OBJECT, encode_name, escape_name, is_shortened

VERSION_DIGITS = 20
_VERSION_DIR = re.compile(r"^v(\d{20})$")


def schema_prefix(schema: str) -> str:
    return encode_name(schema)


def table_prefix(schema: str, table: str) -> str:
    return f"{schema_prefix(schema)}/{encode_name(table)}"


def unshortened_table_prefix(schema: str, table: str) -> str:
    """The table's folder under the plain encoding, as it was before long names were shortened."""
    return f"{escape_name(schema)}/{escape_name(table)}"


def name_object(prefix: str) -> str:
    """Where the full name of the folder `prefix` is kept when that folder is a shortened long name."""
    return f"{prefix}/{NAME_OBJECT}"


def full_name_objects(schema: str, table: str) -> dict[str, str]:
    """path → name for the folders of `schema`.`table` that are shortened (usually none)."""
    objects: dict[str, str] = {}
    if is_shortened(schema_prefix(schema)):
        objects[name_object(schema_prefix(schema))] = schema
    if is_shortened(encode_name(table)):
        objects[name_object(table_prefix(schema, table))] = table
    return objects


def version_dir_name(version: int) -> str:
    return f"v{version:0{VERSION_DIGITS}d}"


def parse_version_dir(name: str) -> int | None:
    m = _VERSION_DIR.match(name)
    return int(m.group(1)) if m else None


def version_dir(prefix: str, version: int) -> str:
    return f"{prefix}/{version_dir_name(version)}"


def changes_root(prefix: str) -> str:
    return f"{prefix}/changes"


def changes_dir(prefix: str, version: int) -> str:
    return f"{changes_root(prefix)}/{version_dir_name(version)}"


def log_path(prefix: str, version: int) -> str:
    return f"{prefix}/_log/{version:0{VERSION_DIGITS}d}.json"


def pruned_log_path(prefix: str) -> str:
    """The summary of the commit records pruned from `_log/` (destination/store/log_pruning.py)."""
    return f"{prefix}/_log/_pruned.json"


def claim_path(prefix: str, version: int, generation: int = 0) -> str:
    """Generation 0 is the first claim; generation k the k-th takeover of it."""
    base = f"{prefix}/_log/{version:0{VERSION_DIGITS}d}.claim"
    return base if generation == 0 else f"{base}.{generation}"


def parse_claim_generation(path: str, prefix: str, version: int) -> int | None:
    """The generation of a claim path of `version` (None for any other path)."""
    base = claim_path(prefix, version)
    if path == base:
        return 0
    suffix = path[len(base) + 1:] if path.startswith(base + ".") else ""
    return int(suffix) if suffix.isdigit() else None


def latest_path(prefix: str) -> str:
    return f"{prefix}/_latest"


def data_file_name(bucket: int | str | None, extension: str = "parquet") -> str:
    """Fresh, never reused names; a tag for humans: `part` (key ranges), the key-hash bucket, or `empty`."""
    tag = bucket if isinstance(bucket, str) else f"b{bucket:04d}" if bucket is not None else "empty"
    return f"{tag}-{uuid.uuid4().hex}.{extension}"
