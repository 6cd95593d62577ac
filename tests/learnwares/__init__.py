"""Tests of app/learnwares/."""
