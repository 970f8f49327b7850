"""Benchmarks: run from the repository root, e.g. ``python -m bench.fanout``. Not tests."""
