"""What every part of the process uses to run: errors, logs, request phases, thread pools, Arrow memory, the
server's settings.

Runs on the driver and inside Spark tasks: imports no driver or task code (tests/test_layout.py)."""
