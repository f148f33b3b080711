"""What a table holds on the server's storage, read the way a consumer reads it: a version's data files from its
`_manifest` (whatever layout wrote it: complete, or referencing earlier versions' files), and the bytes stored under
the table's folder (every version, change file and metadata object)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from destination.on_disk.records import MANIFEST
from destination.storage.base import Storage
from destination.store.versions import TableVersion


def data_file_urls(storage: Storage, version: TableVersion) -> list[str]:
    """The version's data files as its manifest lists them (absolute file:// or s3:// URLs)."""
    manifest = json.loads(storage.read_bytes(f"{version.directory}/{MANIFEST}"))
    return [entry["url"] for entry in manifest["entries"]]


def stored_bytes(storage: Storage, prefix: str) -> int:
    """Bytes under the table's folder. On local disk a file hard-linked into several versions is counted once (it
    takes its blocks once); on S3 every object counts."""
    if storage.spec.is_s3:
        return sum(o.size for o in storage.list_recursive(prefix))
    seen: set[tuple[int, int]] = set()
    total = 0
    for directory, _dirs, names in os.walk(Path(storage.spec.root) / prefix):
        for name in names:
            st = (Path(directory) / name).stat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total
