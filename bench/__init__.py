"""Benchmarks of pt2serde against torch's own serde, behind `make bench` (`python -m bench`)."""
