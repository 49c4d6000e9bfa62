"""Benchmarks and soaks, run as ``python bench/<name>.py`` (the Makefile's bench targets); they
start what they measure with stacks/, never with the tests' code."""
