"""Tests of app/health/."""
