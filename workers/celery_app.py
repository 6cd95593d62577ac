"""How the dock's Celery app is made: queues ``gpu`` (spec fitting) and ``cpu`` (validation,
identification, index). ``make_celery`` is the one place: the runtime of an API process builds one
to publish, the worker process (``workers.main``) one to consume. Nothing is built at import.

Delivery is at least once (acks late, requeue when a worker process dies); the jobs table makes
each step run once: a delivery whose job is not claimable is dropped (see ``app.jobs.service``).
Celery's result backend is off: results live in the jobs table.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu import Queue

from app.jobs.stages import QUEUES, STAGES
from app.settings import Settings

EMBEDDED_TRANSPORT = "workers.broker:Transport"


def broker_options(settings: Settings) -> dict[str, Any]:
    if settings.broker_url:
        # Redis: a message not acked within this time is delivered again (the reaper acts sooner).
        return {"visibility_timeout": 4 * 3600}
    folder = settings.broker_dir.resolve()
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
    }


def make_celery(settings: Settings) -> Celery:
    """A Celery app for ``settings`` (the API uses one to publish, workers to consume)."""
    if not settings.broker_url:
        settings.ensure_dirs()
    app = Celery("pavedock", broker=settings.resolved_broker_url)
    app.conf.update(
        # The embedded broker is kombu's filesystem transport made safe for several processes.
        broker_transport=None if settings.broker_url else EMBEDDED_TRANSPORT,
        broker_transport_options=broker_options(settings),
        broker_connection_retry_on_startup=True,
        task_queues=[Queue(q, routing_key=q) for q in QUEUES],
        task_default_queue="cpu",
        task_routes={
            name: {"queue": stage.queue, "routing_key": stage.queue} for name, stage in STAGES.items()
        },
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        worker_concurrency=settings.worker_concurrency,
        broker_pool_limit=10,
    )
    return app
