"""The embedded broker: kombu's filesystem transport with its races between processes closed.

The embedded mode runs the API, one or more workers and Flower as separate processes on one
broker folder. kombu's filesystem transport (5.7) is safe for one process but not for several:

- **Exchange tables.** A process binding the first queue to an exchange opens the table file
  with ``"wb"``, which empties it *before* the lock is taken. Two processes binding at once (the
  API's worker inspector and Flower both bind their reply queues at start) lose each other's
  binding or leave ``[b][a, c]`` in the file; every later broadcast then fails with "Extra data"
  and no worker ever answers the admin page. Here a table is opened without truncation, read,
  changed and rewritten under one exclusive lock; an empty file reads as an empty table.
- **Messages.** A message file was created under its final name and written afterwards, so a
  consumer polling at that instant could claim an empty file and fail to decode it. Here it is
  written under a name no consumer matches and renamed into place (atomic on one filesystem).
- **Claims.** A consumer claimed a message by moving it to the system's temporary folder; across
  filesystems that is a copy and a delete, so two consumers could both deliver it. Here it is
  renamed into the broker's own ``processed`` folder, beside the queue: exactly one rename wins.

``make_celery`` selects this transport whenever ``PAVEDOCK_BROKER_URL`` is empty.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, virtual
from kombu.utils.json import dumps, loads

Table = list[filesystem.exchange_queue_t]

PARTIAL = ".part"
"""Suffix of a message file still being written: no consumer matches it."""


def _entry(routing_key: str | None, pattern: str | None, queue: str | None) -> filesystem.exchange_queue_t:
    return filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")


def _parse_table(raw: bytes, file: Path) -> Table:
    if not raw.strip():
        return []  # created by a binder that has not written yet, or emptied
    try:
        return [filesystem.exchange_queue_t(*row) for row in loads(raw.decode())]
    except (ValueError, TypeError) as exc:
        raise ChannelError(f"exchange table {file} is not a JSON list of bindings: {exc}") from exc


class Channel(filesystem.Channel):
    """kombu's filesystem channel with atomic table updates, message writes and claims."""

    def _update_table(self, exchange: str, change: Callable[[Table], Table], *, create: bool) -> None:
        """Read, change and rewrite ``exchange``'s table under one exclusive lock."""
        file = self._exchange_file(exchange)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        if create:
            self.control_folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(file, flags, 0o644)
        except FileNotFoundError:
            return  # removed meanwhile: nothing to take out
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc
        with os.fdopen(fd, "r+b", buffering=0) as f_obj:
            filesystem.lock(f_obj, filesystem.LOCK_EX)
            try:
                table = _parse_table(f_obj.read(), file)
                changed = change(table)
                if changed != table:
                    f_obj.seek(0)
                    f_obj.write(dumps(changed).encode())
                    f_obj.truncate()
            finally:
                filesystem.unlock(f_obj)

    def get_table(self, exchange: str) -> Table:
        file = self._exchange_file(exchange)
        try:
            with file.open("rb") as f_obj:
                filesystem.lock(f_obj, filesystem.LOCK_SH)
                try:
                    raw = f_obj.read()
                finally:
                    filesystem.unlock(f_obj)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc
        return _parse_table(raw, file)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        entry = _entry(routing_key, pattern, queue)
        self._update_table(exchange, lambda table: table if entry in table else [entry, *table], create=True)

    def _delete(
        self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any
    ) -> None:
        # The in-memory bookkeeping of kombu's virtual channel, then this process's table update
        # (the filesystem channel's own ``_delete`` is the unlocked read this class replaces).
        virtual.Channel._delete(self, queue, exchange, routing_key, pattern, *args, **kwargs)
        entry = _entry(routing_key, pattern, queue)
        self._update_table(exchange, lambda table: [row for row in table if row != entry], create=False)

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        final = Path(self.data_folder_out) / f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        partial = final.with_name(final.name + PARTIAL)
        try:
            partial.write_bytes(dumps(payload).encode())
            partial.replace(final)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise ChannelError(f"Cannot add file {str(final)!r} to directory") from exc

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        wanted = f"{queue}.msg"
        claims = Path(self.processed_folder)
        claims.mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(self.data_folder_in)):  # noqa: PTH208 (names, sorted: oldest first)
            if name.partition(".")[2] != wanted:
                continue
            claimed = claims / name
            try:
                (Path(self.data_folder_in) / name).rename(claimed)
            except OSError:
                continue  # another consumer claimed it first
            try:
                payload = claimed.read_bytes()
                if not self.store_processed:
                    claimed.unlink()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {str(claimed)!r} from queue.") from exc
            return loads(payload.decode())
        raise Empty()


class Transport(filesystem.Transport):
    """The filesystem transport with the channel above (``broker_transport`` names it)."""

    Channel = Channel
