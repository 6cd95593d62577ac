"""Jobs: the table row is the truth (state, stage, progress, log, result); Celery only carries ids."""
