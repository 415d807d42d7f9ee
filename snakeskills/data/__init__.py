"""Benchmark data: synthetic skills and preparation of real datasets."""
