"""Versioned, atomically committed records directories (see docs/ARCHITECTURE.md)."""
