"""Benchmarks of the real server against baselines measured in the same run (see docs/BENCHMARKS.md)."""
