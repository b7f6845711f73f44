"""Deterministic generators of benchmark data and small sample files."""
