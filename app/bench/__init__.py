"""Benchmarks of the dock on the real datasets: each writes JSON, a Markdown table and a plot."""
