"""Celery workers: the app (``workers.celery_app``) and thin tasks (``workers.tasks``) that take
job ids and call the pipelines in ``app/``. Start one with
``celery -A workers.celery_app worker --queues gpu,cpu`` (or ``pavedock serve`` embedded)."""
