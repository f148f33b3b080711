"""The table model: definitions, keys and their order, types and their changes, field ids, value conversion.

Runs on the driver and inside Spark tasks: imports no driver or task code (tests/test_layout.py)."""
