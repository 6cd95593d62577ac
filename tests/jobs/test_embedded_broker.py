"""The embedded broker (``workers.broker``) under several processes at once: bindings made at
the same instant all survive, a message is never read half-written, and each message is
delivered to exactly one of several consumers."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

from app.settings import Settings
from workers.broker import PARTIAL, Channel
from workers.celery_app import EMBEDDED_TRANSPORT, make_celery

PROCESSES = 6


def connect(folder: Path) -> Connection:
    return Connection(
        "filesystem://localhost/",
        transport=EMBEDDED_TRANSPORT,
        transport_options={
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "processed_folder": str(folder / "processed"),
        },
    )


def make_folders(folder: Path) -> Path:
    for sub in ("queue", "control", "processed"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return folder


def bind_at(folder: str, queue: str, start: float) -> None:
    channel = connect(Path(folder)).channel()
    while time.time() < start:  # every process binds at the same instant
        pass
    channel._queue_bind("celery.pidbox", "", "", queue)


def consume(folder: str, queue: str, start: float, out: Any) -> None:
    channel = connect(Path(folder)).channel()
    got = []
    while time.time() < start:
        pass
    idle_until = time.time() + 1.0
    while time.time() < idle_until:
        try:
            got.append(channel._get(queue)["n"])
            idle_until = time.time() + 1.0
        except Empty:
            time.sleep(0.01)
    out.put(got)


def test_the_embedded_mode_uses_the_hardened_transport(tmp_path: Path) -> None:
    embedded = make_celery(Settings(environment="testing", data_dir=tmp_path))
    assert embedded.conf.broker_transport == EMBEDDED_TRANSPORT
    with embedded.connection_for_write() as conn:
        assert isinstance(conn.default_channel, Channel)
    redis = make_celery(
        Settings(environment="testing", data_dir=tmp_path, broker_url="redis://127.0.0.1:1/0")
    )
    assert redis.conf.broker_transport is None


@pytest.mark.parametrize("trial", range(3))
def test_bindings_made_at_the_same_instant_all_survive(tmp_path: Path, trial: int) -> None:
    # kombu's own transport truncates a new table before locking it: here six processes binding
    # the first queues of one exchange at once left one to five bindings, or a corrupt table.
    folder = make_folders(tmp_path)
    start = time.time() + 0.5
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=bind_at, args=(str(folder), f"reply-{i}", start)) for i in range(PROCESSES)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    table = json.loads((folder / "control" / "celery.pidbox.exchange").read_text())
    assert sorted(row[2] for row in table) == sorted(f"reply-{i}" for i in range(PROCESSES))


def test_a_table_being_created_reads_as_empty_and_unbinding_keeps_the_others(tmp_path: Path) -> None:
    folder = make_folders(tmp_path)
    channel = connect(folder).channel()
    (folder / "control" / "reply.celery.pidbox.exchange").write_bytes(b"")  # created, not yet written
    assert channel.get_table("reply.celery.pidbox") == []
    for queue in ("a", "b", "c"):
        channel._queue_bind("reply.celery.pidbox", queue, "", queue)
    channel._queue_bind("reply.celery.pidbox", "b", "", "b")  # twice: one binding
    channel._delete("b", "reply.celery.pidbox", "b", "")
    assert [row.queue for row in channel.get_table("reply.celery.pidbox")] == ["c", "a"]


def test_a_message_still_being_written_is_not_claimed(tmp_path: Path) -> None:
    folder = make_folders(tmp_path)
    channel = connect(folder).channel()
    (folder / "queue" / f"1_x.cpu.msg{PARTIAL}").write_bytes(b'{"n": ')  # a writer mid-way
    with pytest.raises(Empty):
        channel._get("cpu")
    assert channel._size("cpu") == 0
    channel._put("cpu", {"n": 1})
    assert channel._size("cpu") == 1
    assert channel._get("cpu") == {"n": 1}
    assert list((folder / "processed").iterdir()) == []  # claimed, read, removed


def test_each_message_goes_to_exactly_one_of_several_consumers(tmp_path: Path) -> None:
    folder = make_folders(tmp_path)
    producer = connect(folder).channel()
    messages = 300
    for n in range(messages):
        producer._put("cpu", {"n": n})
    start = time.time() + 0.5
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=consume, args=(str(folder), "cpu", start, out)) for _ in range(4)]
    for proc in procs:
        proc.start()
    delivered = [n for _ in procs for n in out.get(timeout=120)]
    for proc in procs:
        proc.join(timeout=60)
    assert sorted(delivered) == list(range(messages))
