"""Content-addressed artifact store: every blob is named by its sha256.

``LocalStore`` keeps files under ``<root>/sha256/ab/cdef…`` (atomic writes: temp file, fsync,
rename). ``S3Store`` keeps objects under ``<prefix>sha256/ab/cdef…`` in an S3-compatible bucket.
Both verify the digest of what they write, so a stored key always matches its content.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from app.settings import Settings

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1 << 20


class ArtifactNotFound(LookupError):
    """No blob with that digest in the store."""


def _check_key(sha256: str) -> str:
    if not _SHA256.match(sha256):
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    return sha256


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


class ArtifactStore(Protocol):
    """What the services and workers need from a store."""

    def put_file(self, path: Path) -> str:
        """Store the file's content; return its sha256 (idempotent)."""
        ...

    def put_bytes(self, data: bytes) -> str: ...

    def exists(self, sha256: str) -> bool: ...

    def size(self, sha256: str) -> int: ...

    def open(self, sha256: str) -> BinaryIO:
        """A readable binary stream (the caller closes it)."""
        ...

    def get_bytes(self, sha256: str) -> bytes: ...

    def fetch(self, sha256: str, dest: Path) -> Path:
        """Copy the blob to ``dest`` (atomically) and return it."""
        ...

    def delete(self, sha256: str) -> bool: ...

    def ping(self) -> None:
        """Raise if the store cannot be reached."""
        ...


def _atomic_copy(src: BinaryIO, dest: Path) -> str:
    """Write ``src`` to ``dest`` through a temp file in the same folder; return the sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: src.read(CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        Path(tmp_name).replace(dest)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return digest.hexdigest()


class LocalStore:
    """Blobs in a local directory (the embedded default)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        key = _check_key(sha256)
        return self.root / "sha256" / key[:2] / key[2:]

    def put_file(self, path: Path) -> str:
        sha = sha256_file(path)
        target = self.path(sha)
        if not target.exists():
            with Path(path).open("rb") as src:
                written = _atomic_copy(src, target)
            if written != sha:
                target.unlink(missing_ok=True)
                raise OSError(f"{path} changed while it was being stored")
        return sha

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        target = self.path(sha)
        if not target.exists():
            _atomic_copy(io.BytesIO(data), target)
        return sha

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def size(self, sha256: str) -> int:
        try:
            return self.path(sha256).stat().st_size
        except FileNotFoundError:
            raise ArtifactNotFound(sha256) from None

    def open(self, sha256: str) -> BinaryIO:
        try:
            return self.path(sha256).open("rb")
        except FileNotFoundError:
            raise ArtifactNotFound(sha256) from None

    def get_bytes(self, sha256: str) -> bytes:
        with self.open(sha256) as fh:
            return fh.read()

    def fetch(self, sha256: str, dest: Path) -> Path:
        with self.open(sha256) as src:
            _atomic_copy(src, Path(dest))
        return Path(dest)

    def delete(self, sha256: str) -> bool:
        try:
            self.path(sha256).unlink()
        except FileNotFoundError:
            return False
        return True

    def ping(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise OSError(f"artifact directory {self.root} is not writable")


class S3Store:
    """Blobs in an S3-compatible bucket (AWS S3, MinIO, Ceph …) through boto3."""

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "artifacts/",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        client: Any = None,
    ):
        import boto3

        if not bucket:
            raise ValueError("PAVEDOCK_S3_BUCKET is required for the s3 storage backend")
        self.bucket = bucket
        self.prefix = prefix
        self.client: Any = client or boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
        )

    def key(self, sha256: str) -> str:
        sha = _check_key(sha256)
        return f"{self.prefix}sha256/{sha[:2]}/{sha[2:]}"

    def _missing(self, exc: Exception) -> bool:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        return code in {"404", "NoSuchKey", "NotFound"}

    def put_file(self, path: Path) -> str:
        sha = sha256_file(path)
        if not self.exists(sha):
            self.client.upload_file(
                str(path), self.bucket, self.key(sha), ExtraArgs={"Metadata": {"sha256": sha}}
            )
        return sha

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if not self.exists(sha):
            self.client.put_object(Bucket=self.bucket, Key=self.key(sha), Body=data, Metadata={"sha256": sha})
        return sha

    def exists(self, sha256: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
        except ClientError as exc:
            if self._missing(exc):
                return False
            raise
        return True

    def size(self, sha256: str) -> int:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
        except ClientError as exc:
            if self._missing(exc):
                raise ArtifactNotFound(sha256) from None
            raise
        return int(head["ContentLength"])

    def open(self, sha256: str) -> BinaryIO:
        from botocore.exceptions import ClientError

        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key(sha256))
        except ClientError as exc:
            if self._missing(exc):
                raise ArtifactNotFound(sha256) from None
            raise
        body: BinaryIO = obj["Body"]
        return body

    def get_bytes(self, sha256: str) -> bytes:
        body = self.open(sha256)
        try:
            return body.read()
        finally:
            body.close()

    def fetch(self, sha256: str, dest: Path) -> Path:
        body = self.open(sha256)
        try:
            written = _atomic_copy(body, Path(dest))
        finally:
            body.close()
        if written != sha256:
            Path(dest).unlink(missing_ok=True)
            raise OSError(f"object {sha256} in bucket {self.bucket} does not match its digest")
        return Path(dest)

    def delete(self, sha256: str) -> bool:
        existed = self.exists(sha256)
        self.client.delete_object(Bucket=self.bucket, Key=self.key(sha256))
        return existed

    def ping(self) -> None:
        self.client.head_bucket(Bucket=self.bucket)


def make_store(settings: Settings) -> ArtifactStore:
    """The store the settings ask for."""
    if settings.storage_backend == "s3":
        return S3Store(
            settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
        )
    return LocalStore(settings.resolved_artifacts_dir)


__all__ = [
    "ArtifactNotFound",
    "ArtifactStore",
    "LocalStore",
    "S3Store",
    "make_store",
    "sha256_file",
]
