"""Where a version's data file is stored: in the version's own directory, or (referencing layout) in the directory
of the earlier version that wrote it; and where it was first written (complete layout: a carried file is a copy).
Every reader of stored data files resolves them here."""
from __future__ import annotations

from destination.on_disk.datafiles import DataFile


def file_dir(version_directory: str, f: DataFile) -> str:
    """The directory holding `f`, listed by the version at `version_directory` (`<table>/v<N>`)."""
    if f.stored_in is None:
        return version_directory
    return f"{_table_of(version_directory)}/{f.stored_in}"


def file_path(version_directory: str, f: DataFile) -> str:
    return f"{file_dir(version_directory, f)}/{f.name}"


def first_written(version_directory: str, f: DataFile) -> str:
    """The file's path relative to the table's folder where its bytes were first written (`v<K>/<name>`): what
    the Delta and Iceberg metadata reference, the same file in every version that lists it."""
    home = f.written_in or f.stored_in or version_directory.rsplit("/", 1)[-1]
    return f"{home}/{f.name}"


def held_paths(version_directory: str, f: DataFile) -> set[str]:
    """Every stored path a version listing `f` keeps alive: the file it lists and the one first written."""
    return {file_path(version_directory, f), f"{_table_of(version_directory)}/{first_written(version_directory, f)}"}


def _table_of(version_directory: str) -> str:
    return version_directory.rsplit("/", 1)[0]
