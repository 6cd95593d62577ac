"""The local content-addressed store: atomic, idempotent, verified."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from app.storage.store import ArtifactNotFound, LocalStore


def test_blobs_are_named_by_their_sha256(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    data = b"learnware" * 1000
    sha = store.put_bytes(data)
    assert sha == hashlib.sha256(data).hexdigest()
    assert store.path(sha) == tmp_path / "store" / "sha256" / sha[:2] / sha[2:]
    assert store.put_bytes(data) == sha  # idempotent
    source = tmp_path / "file.bin"
    source.write_bytes(data)
    assert store.put_file(source) == sha
    assert store.exists(sha) and store.size(sha) == len(data) and store.get_bytes(sha) == data
    fetched = store.fetch(sha, tmp_path / "out" / "copy.bin")
    assert fetched.read_bytes() == data
    assert not list((tmp_path / "store").rglob(".tmp-*"))
    assert store.delete(sha) and not store.exists(sha) and not store.delete(sha)
    with pytest.raises(ArtifactNotFound):
        store.open(sha)


def test_keys_must_be_digests(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with pytest.raises(ValueError, match="sha256"):
        store.path("../../etc/passwd")
