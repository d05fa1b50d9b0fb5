"""Read the metadata of a ``.gguf`` model file (context length, architecture, chat template)
without loading the model, and tell a GGUF file from anything else with a one-line error.

Only the header is read: the key/value section at the start of the file, not the tensors.
Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["GGUFInfo", "read_gguf_info"]

_MAGIC = b"GGUF"
# value type -> struct format of a scalar (strings and arrays are read apart)
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFInfo:
    """What the pack needs from a GGUF file's metadata.

    Attributes:
        architecture: ``general.architecture`` (``llama``, ``qwen2``, ...).
        context_length: The training context in tokens (``<arch>.context_length``), or ``None``.
        chat_template: The Jinja chat template the file carries, or ``None``.
        name: ``general.name`` when set.
        parameters: How many weights the file's tensors hold (the model's size: 134,515,008
            for the bundled SmolLM2-135M), or ``None`` when the tensor table is unreadable.
    """

    architecture: str
    context_length: int | None
    chat_template: str | None
    name: str | None
    parameters: int | None = None


class _Reader:
    def __init__(self, buf: Any) -> None:
        self.buf, self.pos = buf, 0

    def scalar(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        if n > len(self.buf) - self.pos:
            raise ValueError("string runs past the end of the file")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int, keep: bool) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.scalar("<I"), self.scalar("<Q")
            if item_kind in _SCALARS:  # skipped in one step: nothing the pack reads is an array
                self.pos += struct.calcsize(_SCALARS[item_kind]) * count
                if self.pos > len(self.buf):
                    raise ValueError("array runs past the end of the file")
                return None
            for _ in range(count):
                if item_kind == _STRING:  # skipped, not decoded (a vocabulary: ~50k strings)
                    length = self.scalar("<Q")
                    self.pos += length
                else:
                    self.value(item_kind, keep=False)
            if self.pos > len(self.buf):
                raise ValueError("array runs past the end of the file")
            return None
        raise ValueError(f"unknown value type {kind}")


def read_gguf_info(path: str | Path) -> GGUFInfo:
    """Read ``path``'s GGUF header.

    Raises:
        ConfigurationError: the file is missing, empty, or not a (complete) GGUF file.

    Example:
        >>> from llama_index_rag_pack.models.settings import bundled_gguf_path
        >>> info = read_gguf_info(bundled_gguf_path())
        >>> info.architecture, info.context_length, info.chat_template is not None
        ('llama', 8192, True)
        >>> info.parameters
        134515008
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError(
            f"GGUF model not found: {str(path)!r}. Give the path of an existing .gguf file."
        )
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf)
    except struct.error as e:
        raise ConfigurationError(
            f"Not a valid GGUF model file: {str(path)!r} (it ends inside its header). Give the "
            "path of a complete .gguf file (a download may have been cut short)."
        ) from e
    except (ValueError, OSError) as e:
        raise ConfigurationError(
            f"Not a valid GGUF model file: {str(path)!r} ({e}). Give the path of a complete "
            ".gguf file (a download may have been cut short)."
        ) from e


def _parse(buf: Any) -> GGUFInfo:
    if bytes(buf[:4]) != _MAGIC:
        raise ValueError("no GGUF magic number at the start")
    reader = _Reader(buf)
    reader.pos = 4
    version = reader.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    n_tensors = reader.scalar("<Q")
    n_kv = reader.scalar("<Q")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = reader.string()
        kind = reader.scalar("<I")
        meta[key] = reader.value(kind, keep=True)
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError("no general.architecture key")
    ctx = meta.get(f"{arch}.context_length")
    template = meta.get("tokenizer.chat_template")
    name = meta.get("general.name")
    return GGUFInfo(
        architecture=arch,
        context_length=int(ctx) if isinstance(ctx, int) and ctx > 0 else None,
        chat_template=template if isinstance(template, str) and template.strip() else None,
        name=name if isinstance(name, str) else None,
        parameters=_parameter_count(reader, n_tensors),
    )


def _parameter_count(reader: _Reader, n_tensors: int) -> int | None:
    """The sum of the tensors' element counts, read from the tensor table after the metadata
    (``None`` when it does not read cleanly)."""
    total = 0
    try:
        for _ in range(n_tensors):
            reader.string()  # the tensor's name
            n_dims = reader.scalar("<I")
            if n_dims > 8:
                return None
            size = 1
            for _ in range(n_dims):
                size *= reader.scalar("<Q")
            reader.scalar("<I")  # element type
            reader.scalar("<Q")  # offset
            total += size
    except (struct.error, ValueError):
        return None
    return total or None
