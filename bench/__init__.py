"""Benchmarks: run with `python -m bench` (see README)."""
