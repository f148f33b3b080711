"""The versioned table store (driver side): load a table's latest committed version, claim and commit the next one
atomically, and retire old versions."""
