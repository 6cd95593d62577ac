"""The dock's ML core: spec spaces, PAVE fitting, identification, runners, merging, transfer.

Nothing in this package imports web, database or Celery code: every function works on
tensors, arrays and paths, so a worker, the CLI, a notebook or a test can call it.
"""
