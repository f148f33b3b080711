"""Codecs for the records formats other than Parquet: Avro and the delimited variants (records spec, records-mover).

Chosen per table by the configuration (choice.py) and used for its data files by destination/on_disk/datafiles.py
(docs/reference/records-formats.md).
"""
