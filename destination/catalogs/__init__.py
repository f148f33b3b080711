"""Every table registered in the user's catalog (the configuration field `catalog`; docs/guide/catalogs.md).

The Iceberg metadata file of a table's latest version (destination/table_formats/iceberg.py) is registered in an
Iceberg catalog (`sql`: Iceberg's JDBC catalog tables in a SQLAlchemy database; `glue`: AWS Glue), and the entry is
moved to each new metadata file right after the formats follow a records commit (publish.py). The records commit
stays the commit point: an entry only ever names a metadata file of a committed version, and an entry left behind
(a crash, a catalog outage) is caught up by the next request for the table or by `records-destination publish
--catalog`.
"""
