"""Delta Lake and Iceberg metadata over a table's records versions (docs/guide/querying.md).

Every committed records version N of `<root>/<S>/<T>/` is also Delta version N (`<T>/_delta_log/`) and an Iceberg
snapshot (`<T>/metadata/`), over the same Parquet files, each referenced where it was first written. The records
commit stays the commit point: the formats follow it (`sync.py`), so a format never shows a version that did not
commit, and a writer that finds a format behind brings it up to date.
"""
