"""Where a table's versions live, and the schema and table names a root holds."""
from __future__ import annotations

from destination.on_disk import layout
from destination.on_disk.naming import NAME_OBJECT, decode_name, is_shortened
from destination.storage.base import Storage


class TableNames:
    """Table folders and the names read back from them (a folder name over 255 bytes is shortened)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def list_schemas(self) -> list[str]:
        return [self._name_of(n, n) for n in self.storage.list_children("") if not n.startswith((".", "_"))]

    def list_tables(self, schema: str) -> list[str]:
        parent = layout.schema_prefix(schema)
        return [self._name_of(n, f"{parent}/{n}") for n in self.storage.list_children(parent)
                if not n.startswith(".") and n != NAME_OBJECT]

    def _name_of(self, folder: str, prefix: str) -> str:
        """The schema or table name of `folder` (at `prefix`): decoded, or read back when it was shortened."""
        if is_shortened(folder):
            return self.storage.read_bytes(layout.name_object(prefix)).decode("utf-8")
        return decode_name(folder)

    def table_prefix(self, schema: str, table: str) -> str:
        """The table's folder (layout.table_prefix), except that a table S3 holds under the longer folder names
        it was created with, before names over 255 bytes were shortened, keeps that folder."""
        prefix = layout.table_prefix(schema, table)
        if self.storage.spec.is_s3:
            unshortened = layout.unshortened_table_prefix(schema, table)
            if unshortened != prefix and self.storage.exists(layout.latest_path(unshortened)):
                return unshortened
        return prefix

    def keep_full_names(self, schema: str, table: str, prefix: str) -> None:
        """Store the full name of each shortened folder of the table, once (listing reads them back)."""
        if prefix != layout.table_prefix(schema, table):
            return  # an unshortened folder from before: its names decode
        for path, name in layout.full_name_objects(schema, table).items():
            if not self.storage.exists(path):
                self.storage.write_bytes(path, name.encode("utf-8"))
