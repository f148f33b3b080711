"""The roots the served catalog answers for, one `warehouse` each: the server's `--root`, and every root a request
wrote to (registered by the store of that root, `watch`). A client chooses one by `warehouse` in `GET /v1/config`
(none or empty: the server's root) and is told its `prefix`, which every later path carries."""
from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from destination.iceberg_rest.tables import RootTables
from destination.storage.base import Storage, StorageSpec
from destination.store.versions import CommitEvent

Observer = Callable[[CommitEvent], None]
Dropped = Callable[[str, str], None]


def root_key(root: str) -> str:
    """A root as a warehouse names it: an S3 URL without its trailing `/`, a local path made absolute."""
    if root.startswith("s3://"):
        return root.rstrip("/")
    return os.path.realpath(os.path.expanduser(root))


def file_io_config(spec: StorageSpec, vend_credentials: bool) -> dict[str, str]:
    """What a client needs to read the root's files, in the FileIO property names Iceberg's Java library,
    pyiceberg and DuckDB read: nothing for a local root; an S3 root's endpoint, region and path-style addressing
    (the destination's own with an endpoint), and its access key only when the operator asked for it."""
    if not spec.is_s3:
        return {}
    config: dict[str, str] = {}
    if spec.s3_endpoint:
        config.update({"s3.endpoint": spec.s3_endpoint, "s3.path-style-access": "true"})
    if spec.s3_region:
        config.update({"s3.region": spec.s3_region, "client.region": spec.s3_region})
    if vend_credentials and spec.access_key_id and spec.secret_access_key:
        config.update({"s3.access-key-id": spec.access_key_id, "s3.secret-access-key": spec.secret_access_key})
    return config


@dataclass(frozen=True)
class Warehouse:
    """One root served: `prefix`, the path segment of its requests; `config`, the load answers' file IO config."""

    name: str
    prefix: str
    tables: RootTables
    config: dict[str, str]


class Warehouses:
    def __init__(self, server_root: Storage, vend_credentials: bool = False) -> None:
        self._vend = vend_credentials
        self._lock = threading.Lock()
        self._by_name: dict[str, Warehouse] = {}
        self._by_prefix: dict[str, Warehouse] = {}
        self.default = self._add(server_root)

    def _add(self, storage: Storage) -> Warehouse:
        name = root_key(storage.spec.root)
        with self._lock:
            found = self._by_name.get(name)
            if found is None:
                prefix = "root-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
                found = Warehouse(name, prefix, RootTables(storage), file_io_config(storage.spec, self._vend))
                self._by_name[name] = self._by_prefix[prefix] = found
            return found

    def named(self, warehouse: str) -> Warehouse | None:
        """The warehouse of `GET /v1/config?warehouse=`: a root's URL or path as the configuration gives it."""
        if not warehouse:
            return self.default
        with self._lock:
            return self._by_name.get(root_key(warehouse))

    def by_prefix(self, prefix: str | None) -> Warehouse | None:
        if prefix is None:
            return self.default
        with self._lock:
            return self._by_prefix.get(prefix)

    def watch(self, storage: Storage, observer: Observer) -> tuple[Observer, Dropped]:
        """A store's commit observer (`observer`, then the index's) and drop hook for the root of `storage`, which
        is served from now on."""
        tables = self._add(storage).tables

        def observe(event: CommitEvent) -> None:
            observer(event)
            tables.committed(event)

        return observe, tables.dropped
