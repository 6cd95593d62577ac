"""Tests of app/jobs/."""
