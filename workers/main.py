"""The worker process's Celery app, from the process's settings (``PAVEDOCK_*``), with the tasks
registered: ``celery -A workers.main worker --queues gpu,cpu`` (and ``inspect``, ``flower``).
Only a worker, Flower or the celery command imports this module."""

from __future__ import annotations

from app.settings import get_settings
from workers import tasks
from workers.celery_app import make_celery

app = make_celery(get_settings())
tasks.register(app)
