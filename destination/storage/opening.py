"""The store of a spec: the local filesystem's or S3's (the backends import the interface in base.py; this module
picks one, so the interface imports neither)."""
from __future__ import annotations

from functools import lru_cache

from destination.storage.base import Storage, StorageSpec


def open_storage(spec: StorageSpec) -> Storage:
    if spec.is_s3:
        return _s3_storage(spec)
    from destination.storage.local import LocalStorage

    return LocalStorage(spec)


@lru_cache(maxsize=16)
def _s3_storage(spec: StorageSpec) -> Storage:
    """One S3 store per spec and process. Creating a boto3 client loads its service model (~160 ms measured), and
    every Spark task and RPC opens the store: 16 bucket tasks on 2 cores paid over a second per job. The client and
    pyarrow's S3FileSystem are thread-safe, and the store keeps no other state."""
    from destination.storage.s3 import S3Storage

    return S3Storage(spec)
