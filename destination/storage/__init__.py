"""Object storage behind one small interface: the local filesystem and S3."""
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage

__all__ = ["Storage", "StorageSpec", "open_storage"]
