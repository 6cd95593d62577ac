"""Tests of the benchmarks in app/bench/."""
