"""The benchmarks' tests: each runs a benchmark's smallest profile, or its pieces, end to end
(``single_thread``, for their tiny matrices, is in tests/conftest.py)."""
