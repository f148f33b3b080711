"""Where a version's data file is stored: in the version's own directory, or (referencing layout) in the directory
of the earlier version that wrote it. Every reader of stored data files resolves them here."""
from __future__ import annotations

from destination.table_store.datafiles import DataFile


def file_dir(version_directory: str, f: DataFile) -> str:
    """The directory holding `f`, listed by the version at `version_directory` (`<table>/v<N>`)."""
    if f.stored_in is None:
        return version_directory
    return f"{version_directory.rsplit('/', 1)[0]}/{f.stored_in}"
