"""Benchmarks that ship with the package (run by `pre bench`)."""
