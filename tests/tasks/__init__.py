"""Tests of app/tasks/."""
