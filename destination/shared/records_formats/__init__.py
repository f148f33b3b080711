"""Codecs for the records formats other than Parquet: Avro and the delimited variants (records spec, records-mover).

Not yet selectable: the write path still writes Parquet only (see docs/reference/records-formats.md).
"""
