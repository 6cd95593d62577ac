"""Tests of app/index/."""
