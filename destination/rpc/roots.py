"""The roots the server writes to: one store per root and its stored options, kept for the process, and the write
path of each request's configuration over it (its change, placement and records settings). Built once by the
server's assembly (destination/rpc/server.py) and handed to the service, which only asks it for write paths."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from destination.catalogs.catalog_settings import CatalogSettings, catalog_settings
from destination.catalogs.kinds import check_store_options, publisher_for
from destination.changes.change_settings import change_settings
from destination.on_disk.options import StoreOptions, store_options
from destination.rpc.configuration import storage_spec, target_file_bytes, unknown_fields_message
from destination.rpc.observe import Observer
from destination.runtime import logs
from destination.runtime.errors import Problems
from destination.runtime.settings import ServerOptions
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.write.copy_job import SparkCopies
from destination.write.jobs import PlacementSettings
from destination.write.staging import stages_files
from destination.write.write_path import WritePath, write_path_for

if TYPE_CHECKING:
    from destination.iceberg_rest.warehouses import Warehouses


class Roots:
    """Every root the server's requests name, its store kept (one per root, stored options and catalog)."""

    def __init__(self, options: ServerOptions, observer: Observer, spark: Callable[[], SparkSession]) -> None:
        self.options = options
        self._observer = observer
        self._spark = spark
        self._stores: dict[tuple[StorageSpec, StoreOptions, CatalogSettings], TableStore] = {}
        self._lock = threading.Lock()
        self._warned_configurations: set[str] = set()
        self.served: Warehouses | None = None  # `serve --iceberg-rest-port`: the roots written to are served too

    def write_path_of(self, configuration: Any) -> WritePath:
        """The store of the configuration's root (one per root, kept) and the writers of its tables, with the
        configuration's change and placement settings."""
        config = dict(configuration)
        self._warn_unknown_fields(config)
        problems = Problems()  # every bad field in one answer
        spec = problems.attempt(lambda: storage_spec(config, self.options))
        changes = problems.attempt(lambda: change_settings(config))
        file_bytes = problems.attempt(lambda: target_file_bytes(config))
        catalog = problems.attempt(lambda: catalog_settings(config, *_s3_access(spec)))
        chosen = problems.attempt(lambda: store_options(config, spec.is_s3 if spec else False))
        problems.raise_any()
        assert spec is not None and changes is not None and file_bytes is not None
        assert catalog is not None and chosen is not None
        stored = check_store_options(catalog, chosen)
        with self._lock:
            store = self._stores.get((spec, stored, catalog))
            if store is None:
                storage = open_storage(spec)
                observer, dropped = self._observer.commit_observer(spec.root), None
                if self.served is not None:  # the served catalog hears of each commit and drop at once
                    observer, dropped = self.served.watch(storage, observer)
                store = self._stores[(spec, stored, catalog)] = TableStore(
                    storage, stored.retention, observer=observer, layout=stored.layout,
                    copies=SparkCopies(self._spark), publish=publisher_for(stored.table_formats, catalog), dropped=dropped)
        placement = PlacementSettings(target_file_bytes=file_bytes, scratch=self._scratch())
        return write_path_for(store, self._spark, changes, self.options.small_request_bytes, placement, stored.records)

    def _scratch(self) -> StorageSpec | None:
        """Sorted runs go to a local directory when the executors are local; else to the table's storage."""
        if stages_files(self.options.spark_master):
            return None
        return StorageSpec(root=self.options.scratch_dir, s3_retry_attempts=self.options.s3_retry_attempts)

    def _warn_unknown_fields(self, config: dict[str, str]) -> None:
        """Once per distinct set of unknown fields: every request carries the configuration."""
        message = unknown_fields_message(config)
        if message is not None and message not in self._warned_configurations:
            self._warned_configurations.add(message)
            logs.warning(message)


def _s3_access(spec: StorageSpec | None) -> tuple[str, str, str]:
    """The S3 region and keys a catalog shares with the storage (none when the storage's fields are wrong)."""
    return (spec.s3_region, spec.access_key_id, spec.secret_access_key) if spec else ("", "", "")
