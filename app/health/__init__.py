"""Probes and metrics: liveness, readiness of each dependency, and the Prometheus scrape."""
