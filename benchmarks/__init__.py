"""Benchmarks, each printing a ratio against a baseline measured in the same run."""
