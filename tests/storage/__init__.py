"""Tests of app/storage/."""
