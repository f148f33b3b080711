"""User commands that read or repair a root without a server: tables, show, changes, repair, validate."""
