"""The Python client (``app.client.DockClient``) against the real app, through httpx."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient

from app.client import DockAPIError, DockClient
from app.main import create_app
from app.runtime import Runtime
from tests.fixtures.service import Keys, add_ready_learnware, write_spec


@pytest.fixture
def server(runtime: Runtime) -> Iterator[str]:
    """The app served by a real uvicorn on a free port, in a thread of this process."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(
        uvicorn.Config(create_app(runtime=runtime), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def dock(url: str, key: str) -> DockClient:
    return DockClient(url, key)


def test_submit_list_download_and_errors(
    server: str, keys: Keys, tfidf_packages: dict[str, Path], tmp_path: Path
) -> None:
    with dock(server, keys.developer) as developer:
        sub = developer.submit(tfidf_packages["trec"])
        assert sub.status.value == "pending"
        assert developer.job(sub.job_id).state.value == "queued"
        assert developer.learnwares(mine=True).pagination.total_count == 1
        path = developer.download(sub.learnware_id, tmp_path)
        assert path.read_bytes() == tfidf_packages["trec"].read_bytes()
        with pytest.raises(DockAPIError) as error:
            developer.learnware(12345)
        assert error.value.status == 404 and error.value.code == "not_found"
    with dock(server, keys.admin) as admin:
        issued = admin.create_key("user", "from the client")
        assert issued.token.startswith("pdk_")
        assert any(k.prefix == issued.prefix for k in admin.list_keys())
        assert [j.id for j in admin.jobs(state="queued").items] == [sub.job_id]


def test_identify_and_task_from_a_spec(
    server: str, client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int], tmp_path: Path
) -> None:
    space_id, dim = space
    vector = np.sign(np.random.default_rng(6).standard_normal(dim))
    owner = client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"]
    best = add_ready_learnware(runtime, owner, "best", vector)
    spec = write_spec(tmp_path / "query", space_id, vector)
    with dock(server, keys.user) as user:
        assert user.default_space().id == space_id
        ranked = user.identify(spec, k=5)
        assert ranked.matches[0].learnware_id == best and ranked.matches[0].score > 0.999
        posted = user.task_from_spec(spec, top_k=5, label_names=["a", "b"])
        task = user.task_result(posted.task_id)
        assert task.status.value == "pending" and task.n_examples == 0
