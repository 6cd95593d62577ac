"""Reuse jobs: merge learnwares, fine-tune one on a user's shots (PAVE♦), transfer one to another base."""
