"""Learnwares: submission, listing, download and deletion; the validate → spec → index pipeline."""
