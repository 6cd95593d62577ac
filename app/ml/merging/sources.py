"""Where tensors come from and go to, one tensor at a time.

A `TensorSource` lists its tensor names and hands out one tensor on request, so a merge holds
one tensor of each model at a time instead of T whole models. A `TensorSink` receives merged
tensors one by one; `SafetensorsSink` streams them to disk without keeping them in memory.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

import torch
from safetensors import safe_open
from torch import Tensor

from app.ml.errors import InvalidInput

_SAFETENSORS_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}

_COPY_CHUNK = 16 * 1024 * 1024


@runtime_checkable
class TensorSource(Protocol):
    """A model's tensors, read one at a time."""

    def keys(self) -> list[str]:
        """Tensor names, in the order a merge visits them."""
        ...

    def get(self, name: str) -> Tensor:
        """The tensor called `name`. It may share memory with the source: callers never modify it in place."""
        ...


class DictSource:
    """A `TensorSource` over tensors already in memory (a state dict)."""

    def __init__(self, tensors: Mapping[str, Tensor]) -> None:
        self._tensors = tensors

    def keys(self) -> list[str]:
        return list(self._tensors)

    def get(self, name: str) -> Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise InvalidInput(f"no tensor {name!r} in this state dict") from None


class SafetensorsSource:
    """A `TensorSource` over a safetensors file, or a directory of safetensors shards, read lazily."""

    def __init__(self, path: Path | str) -> None:
        path = Path(path)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files or not all(file.is_file() for file in files):
            raise InvalidInput(f"no safetensors file at {path}")
        self.path = path
        self._handles = [safe_open(str(file), framework="pt", device="cpu") for file in files]
        self._where: dict[str, int] = {}
        for index, handle in enumerate(self._handles):
            for name in handle.keys():  # noqa: SIM118 (safe_open handles are not mappings)
                if name in self._where:
                    raise InvalidInput(f"tensor {name!r} appears in more than one shard under {path}")
                self._where[name] = index

    def keys(self) -> list[str]:
        return list(self._where)

    def get(self, name: str) -> Tensor:
        if name not in self._where:
            raise InvalidInput(f"no tensor {name!r} in {self.path}")
        tensor: Tensor = self._handles[self._where[name]].get_tensor(name)
        return tensor

    def close(self) -> None:
        """Release the file handles."""
        self._handles.clear()

    def __enter__(self) -> SafetensorsSource:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class TensorSink(Protocol):
    """Receives merged tensors one at a time."""

    def write(self, name: str, tensor: Tensor) -> None:
        """Store `tensor` under `name`; the caller drops its reference afterwards."""
        ...

    def close(self) -> None:
        """Finish writing."""
        ...


class DictSink:
    """A `TensorSink` that collects the merged tensors in `tensors`."""

    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}

    def write(self, name: str, tensor: Tensor) -> None:
        self.tensors[name] = tensor

    def close(self) -> None:
        return None


class SafetensorsSink:
    """A `TensorSink` streaming tensors into a safetensors file without holding them in memory.

    The safetensors header (names, shapes, offsets) comes first in the file but is only known
    once every tensor has been seen, so the tensor bytes go to a side file first; `close()`
    writes the header and appends the bytes in chunks.
    """

    def __init__(self, path: Path | str, metadata: Mapping[str, str] | None = None) -> None:
        self.path = Path(path)
        self._metadata = dict(metadata or {})
        self._data_path = self.path.with_name(self.path.name + ".data.partial")
        self._data = self._data_path.open("wb")
        self._header: dict[str, dict[str, object]] = {}
        self._offset = 0

    def write(self, name: str, tensor: Tensor) -> None:
        if name in self._header:
            raise InvalidInput(f"tensor {name!r} written twice to {self.path}")
        if tensor.dtype not in _SAFETENSORS_DTYPES:
            raise InvalidInput(
                f"tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot store here"
            )
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
        self._data.write(data.data)
        self._header[name] = {
            "dtype": _SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [self._offset, self._offset + data.nbytes],
        }
        self._offset += data.nbytes

    def close(self) -> None:
        if self._data.closed:
            return
        self._data.close()
        header: dict[str, object] = dict(self._header)
        if self._metadata:
            header["__metadata__"] = self._metadata
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)
        with self.path.open("wb") as out, self._data_path.open("rb") as data:
            out.write(struct.pack("<Q", len(encoded)))
            out.write(encoded)
            shutil.copyfileobj(data, out, _COPY_CHUNK)
        self._data_path.unlink()

    def __enter__(self) -> SafetensorsSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._data.close()
            self._data_path.unlink(missing_ok=True)
