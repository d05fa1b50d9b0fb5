"""Read and write the package's JSON artifacts safely: one place for what every loader and saver
of a file needs.

Reading (:func:`read_text_file`, :func:`read_json_file`) opens only a regular file (never a
directory, FIFO or device, which would fail, hang or never end) of at most
:data:`MAX_FILE_BYTES`, decodes it as UTF-8 and parses it as JSON nesting at most
:data:`MAX_FILE_DEPTH` levels. Anything else is one :class:`ConfigurationError` line naming the
file and what is wrong with it.

Writing (:func:`write_text_atomic`, :func:`write_json_atomic`) encodes the whole text first (a
lone surrogate, which UTF-8 cannot hold, is refused with one line: nothing is written), writes
it to a temporary file in the target's directory and renames it over the target: a failed save
leaves the previous file as it was.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = write_json_atomic(path, {"x": [1, 2]}, what="an example")
    >>> read_json_file(path, what="an example")
    {'x': [1, 2]}
    >>> parse_json("[[[1]]]", where="inline", max_depth=2)
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: inline: JSON nested more than 2 levels deep.
"""  # noqa: E501  (doctest output is one line)

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_FILE_DEPTH",
    "in_file",
    "json_depth",
    "parse_json",
    "read_json_file",
    "read_text_file",
    "write_json_atomic",
    "write_text_atomic",
]

MAX_FILE_BYTES = 256 * 1024 * 1024
"""The largest artifact file read (256 MiB): a saved router of many routes is tens of MiB."""
MAX_FILE_DEPTH = 100
"""The deepest nesting of containers an artifact may have (a judge search tree takes three
levels per follow-up level; nothing else comes near)."""


def _sentence(where: str, reason: str, hint: str) -> str:
    return f"{where}: {reason}" + (f"; {hint}" if hint else "") + "."


def read_text_file(
    path: str | Path,
    *,
    what: str,
    missing: str | None = None,
    hint: str = "",
    max_bytes: int = MAX_FILE_BYTES,
) -> str:
    """The UTF-8 text of the regular file ``path`` (``what`` names it in errors, e.g. ``"the
    fusion config"``; ``missing`` is the whole message for a file that does not exist).

    Raises:
        ConfigurationError: the file is missing, not a regular file, larger than ``max_bytes``,
            unreadable, or not UTF-8.
    """
    path = Path(path)
    where = f"Cannot read {what} from {path}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise ConfigurationError(missing or _sentence(where, "no such file", hint)) from None
    except OSError as e:
        raise ConfigurationError(_sentence(where, e.strerror or str(e), hint)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            reason = "it is a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise ConfigurationError(_sentence(where, reason, hint or "give a file"))
        if info.st_size > max_bytes:
            raise ConfigurationError(_sentence(where, f"larger than {max_bytes} bytes", hint))
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise ConfigurationError(_sentence(where, e.strerror or str(e), hint)) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ConfigurationError(_sentence(where, f"larger than {max_bytes} bytes", hint))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        reason = f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        raise ConfigurationError(_sentence(where, reason, hint)) from None


def json_depth(value: Any) -> int:
    """How many containers (lists, dicts) deep ``value`` nests, measured without recursion.

    Example:
        >>> json_depth({"a": [1, {"b": 2}]}), json_depth(5)
        (3, 0)
    """
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def parse_json(text: str, *, where: str, hint: str = "", max_depth: int = MAX_FILE_DEPTH) -> Any:
    """``text`` parsed as JSON nesting at most ``max_depth`` containers deep.

    Raises:
        ConfigurationError: ``"<where>: <what is wrong>[; <hint>]."``
    """
    try:
        data = json.loads(text)
        too_deep = json_depth(data) > max_depth
    except json.JSONDecodeError as e:
        reason = f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        raise ConfigurationError(_sentence(where, reason, hint)) from None
    except RecursionError:  # the decoder's own stack gave out first
        too_deep = True
    if too_deep:
        reason = f"JSON nested more than {max_depth} levels deep"
        raise ConfigurationError(_sentence(where, reason, hint)) from None
    return data


def read_json_file(
    path: str | Path,
    *,
    what: str,
    missing: str | None = None,
    hint: str = "",
    max_bytes: int = MAX_FILE_BYTES,
    max_depth: int = MAX_FILE_DEPTH,
) -> Any:
    """The JSON value in the file ``path`` (:func:`read_text_file`, then :func:`parse_json`).

    Raises:
        ConfigurationError: the file cannot be read (see :func:`read_text_file`), is not JSON, or
            nests too deeply; the message names the file.
    """
    text = read_text_file(path, what=what, missing=missing, hint=hint, max_bytes=max_bytes)
    return parse_json(text, where=f"Cannot read {what} from {path}", hint=hint, max_depth=max_depth)


@contextmanager
def in_file(path: str | Path) -> Iterator[None]:
    """Prefix the message of a :class:`ConfigurationError` raised inside with ``"<path>: "`` (a
    validation error about a value read from that file)."""
    try:
        yield
    except ConfigurationError as e:
        message = str(e)
        if message.startswith(f"{path}:"):
            raise
        raise ConfigurationError(f"{path}: {message}") from None


def _remove(path: Path) -> None:
    """Remove the temporary file ``path`` when there is one."""
    with suppress(OSError):
        path.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str, *, what: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` through a temporary file in the same directory and
    ``os.replace``; returns the path. The previous file is untouched when anything fails.

    Raises:
        ConfigurationError: ``path`` is a directory, ``text`` holds a lone surrogate (refused,
            not replaced: nothing is written), or the write fails (disk full, no permission).
    """
    path = Path(path)
    where = f"Cannot save {what} to {path}"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        reason = f"its text holds the lone surrogate {text[e.start]!r}, which is not valid Unicode"
        raise ConfigurationError(_sentence(where, reason, "nothing was written")) from None
    if path.is_dir():
        raise ConfigurationError(_sentence(where, "it is a directory", "give a file path"))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        reason, hint = e.strerror or str(e), "the previous file is unchanged"
        raise ConfigurationError(_sentence(where, reason, hint)) from None
    except BaseException:
        _remove(tmp)
        raise
    return path


def write_json_atomic(
    path: str | Path,
    data: Any,
    *,
    what: str,
    indent: int | None = None,
    sort_keys: bool = False,
) -> Path:
    """Write ``data`` as UTF-8 JSON (non-ASCII kept as is, a final newline) with
    :func:`write_text_atomic`; returns the path."""
    text = json.dumps(data, ensure_ascii=False, indent=indent, sort_keys=sort_keys) + "\n"
    return write_text_atomic(path, text, what=what)
