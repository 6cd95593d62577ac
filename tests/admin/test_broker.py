"""Queue depth asked of a real Redis broker (an LLEN per queue) and of the embedded broker (the
queue's files), with messages really published through Celery."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.jobs.dispatch import queue_depths
from app.settings import Settings
from workers.celery_app import make_celery

REDIS_URL = os.environ.get("PAVEDOCK_TEST_REDIS_URL")


def publish(celery: Any, queue: str, n: int) -> None:
    for job_id in range(n):
        celery.send_task("index.rebuild", args=[job_id], queue=queue, routing_key=queue)


@pytest.fixture
def redis_celery() -> Iterator[Any]:
    if not REDIS_URL:
        pytest.skip("set PAVEDOCK_TEST_REDIS_URL (.ci/run does)")
    # A database of its own, so no other test's worker sees these messages.
    url = urlsplit(REDIS_URL)._replace(path="/13").geturl()
    celery = make_celery(Settings(environment="testing", broker_url=url))
    with celery.connection_for_write() as conn:
        conn.default_channel.client.flushdb()
    try:
        yield celery
    finally:
        with celery.connection_for_write() as conn:
            conn.default_channel.client.flushdb()


def test_redis_queue_depths(redis_celery: Any) -> None:
    assert queue_depths(redis_celery) == {"gpu": 0, "cpu": 0}
    publish(redis_celery, "cpu", 3)
    publish(redis_celery, "gpu", 1)
    assert queue_depths(redis_celery) == {"gpu": 1, "cpu": 3}


def test_embedded_queue_depths(tmp_path: Path) -> None:
    celery = make_celery(Settings(environment="testing", data_dir=tmp_path / "var"))
    assert queue_depths(celery) == {"gpu": 0, "cpu": 0}
    publish(celery, "gpu", 2)
    assert queue_depths(celery) == {"gpu": 2, "cpu": 0}


def test_an_unreachable_broker_is_an_error_not_zero() -> None:
    celery = make_celery(Settings(environment="testing", broker_url="redis://127.0.0.1:1/0"))
    with pytest.raises(Exception, match=r"(?i)connect|refused"):
        queue_depths(celery)
