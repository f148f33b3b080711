"""Object storage behind one small interface: the local filesystem and S3."""
from destination.shared.storage.base import Storage, StorageSpec
from destination.shared.storage.opening import open_storage

__all__ = ["Storage", "StorageSpec", "open_storage"]
