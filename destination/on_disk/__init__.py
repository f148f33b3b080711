"""The on-disk layout of a records directory, a public contract: paths, folder names, data files, where a version's
files live, the layout and retention options, and the metadata files (docs/design/layouts-and-retention.md)."""
