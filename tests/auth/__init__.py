"""Tests of app/auth/."""
