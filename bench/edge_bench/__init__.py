"""Benchmarks of the edge (docs/BENCHMARKS.md), run as ``python bench/edge_bench/<name>.py``."""
