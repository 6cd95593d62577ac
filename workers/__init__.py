"""Celery workers: how the Celery app is made (``workers.celery_app``), the worker process's app
(``workers.main``) and thin tasks (``workers.tasks``) that take job ids and call the pipelines in
``app/``. Start one with ``celery -A workers.main worker --queues gpu,cpu`` (or ``pavedock serve``
embedded)."""
