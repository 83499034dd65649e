"""Our own fuzzer: structured mutations of real archives and documents sent through the HTTP API.

`python -m tests.fuzz --mutants N --seed S [--minutes M]` runs a campaign against a server it
starts; `make fuzz` runs a long one; tests/fuzz/test_fuzz_bounded.py runs a bounded one in the
suite.
"""
