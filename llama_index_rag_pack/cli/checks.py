"""What the CLI checks before it loads any model or opens any database.

Nothing here imports LlamaIndex, torch or pymilvus, so a bad question or ``--uri`` is answered in
well under a second with one line that says what to do, and nothing (no
``rag_pack_data/milvus.db``) is left behind.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO
from urllib.parse import urlparse

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    MilvusUnavailableError,
)

__all__ = [
    "EXIT_WORDS",
    "SERVER_SCHEMES",
    "check_index_exists",
    "check_input",
    "check_question",
    "check_uri",
    "is_server_uri",
    "questions_from",
    "server_address",
    "wants_routing",
]

SERVER_SCHEMES = ("http", "https", "tcp", "grpc", "unix")
EXIT_WORDS = frozenset({"exit", "quit", ":q"})
CONNECT_TIMEOUT_S = 3.0
_START_SERVER = (
    "start it (`milvus-lite server --data-dir ./milvus-data --host 127.0.0.1 --port 19530`), "
    "check the uri, or use a local Milvus Lite path such as ./rag_pack_data/milvus.db"
)
_EXAMPLE = 'rag-pack ask "What is Milvus?"'


def check_question(question: str, position: int | None = None) -> str:
    """``question`` stripped, or ``ConfigurationError`` when it is empty or only whitespace.

    Example:
        >>> check_question("  What is Milvus? ")
        'What is Milvus?'
        >>> check_question("   ")
        Traceback (most recent call last):
        ...
        llama_index_rag_pack.core.errors.ConfigurationError: The question is empty: ask something, e.g. rag-pack ask "What is Milvus?".
    """  # noqa: E501  (doctest output: the exception line can't be wrapped)
    text = question.strip()
    if not text:
        which = "The question" if position is None else f"Question {position}"
        raise ConfigurationError(f"{which} is empty: ask something, e.g. {_EXAMPLE}.")
    return text


def questions_from(arguments: Sequence[str], stdin: TextIO) -> list[str]:
    """The questions of ``rag-pack ask``: each argument, and for ``-`` each non-blank line of
    ``stdin``.

    Raises:
        ConfigurationError: an empty argument, or ``-`` with no question on stdin.
    """
    questions: list[str] = []
    for i, arg in enumerate(arguments, 1):
        if arg == "-":
            lines = [line.strip() for line in stdin]
            if not any(lines):
                raise ConfigurationError(
                    "No question on stdin: pipe one question per line, e.g. "
                    "`echo 'What is Milvus?' | rag-pack ask -`."
                )
            questions.extend(line for line in lines if line)
        else:
            questions.append(check_question(arg, i if len(arguments) > 1 else None))
    return questions


def lines_until_exit(lines: Iterable[str]) -> Iterable[str]:
    """The non-blank lines of a chat session, up to ``exit``/``quit`` or the end of input."""
    for line in lines:
        text = line.strip()
        if text.lower() in EXIT_WORDS:
            return
        if text:
            yield text


def is_server_uri(uri: str) -> bool:
    """True for ``scheme://...`` (a Milvus server), False for a Milvus Lite path."""
    return "://" in uri or uri.startswith("unix:")


def server_address(uri: str) -> tuple[str, int] | None:
    """``(host, port)`` of a server ``uri`` (``None`` for a unix socket).

    Raises:
        ConfigurationError: an unknown scheme, no host, or a port that is not 1-65535.

    Example:
        >>> server_address("http://127.0.0.1:19530")
        ('127.0.0.1', 19530)
        >>> server_address("https://milvus.example.com")
        ('milvus.example.com', 443)
    """
    parsed = urlparse(uri)
    if parsed.scheme not in SERVER_SCHEMES:
        raise ConfigurationError(
            f"--uri {uri!r} has the unknown scheme {parsed.scheme!r}: use "
            f"{', '.join(s + '://' for s in SERVER_SCHEMES[:4])} for a Milvus server "
            "(e.g. http://127.0.0.1:19530) or a path ending in '.db' for Milvus Lite."
        )
    if parsed.scheme == "unix":
        return None
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise ConfigurationError(
            f"--uri {uri!r} has an invalid port: use a port from 1 to 65535, "
            "e.g. http://127.0.0.1:19530."
        )
    if not parsed.hostname:
        raise ConfigurationError(f"--uri {uri!r} names no host: use e.g. http://127.0.0.1:19530.")
    return parsed.hostname, port or (443 if parsed.scheme == "https" else 19530)


def check_uri(uri: str, *, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast when ``uri`` cannot work: a malformed server address, a server where nothing
    answers within ``timeout`` seconds, a Milvus Lite path that does not end in ``.db``, or one
    without Milvus Lite installed.

    Raises:
        ConfigurationError: the uri is malformed.
        MilvusUnavailableError: nothing answers at a server address.
    """
    if not uri.strip():
        raise ConfigurationError("--uri is empty: give a *.db path or http://host:19530.")
    if not is_server_uri(uri):
        if not uri.endswith(".db"):
            raise ConfigurationError(
                f"Milvus Lite needs a path ending in '.db', got {uri!r} "
                "(e.g. ./rag_pack_data/milvus.db), or give a server address http://host:19530."
            )
        from llama_index_rag_pack.core import lite_install

        if not lite_install.lite_installed():
            raise ConfigurationError(lite_install.lite_missing_message(uri))
        return
    address = server_address(uri)
    if address is None:
        return
    try:
        with socket.create_connection(address, timeout=timeout):
            pass
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise MilvusUnavailableError(
            f"Cannot reach Milvus at {uri} ({reason}): {_START_SERVER}."
        ) from e


def check_index_exists(uri: str, collection: str | None) -> None:
    """For a Milvus Lite ``uri``: raise when its database does not exist yet (so asking never
    creates an empty one). A server is checked when the collection is opened.

    Raises:
        CollectionNotFoundError: the ``*.db`` path does not exist.
    """
    if is_server_uri(uri) or Path(uri).exists():
        return
    what = f"No collection {collection!r}" if collection else "No collections"
    raise CollectionNotFoundError(
        f"{what} in Milvus at {uri}: the database does not exist yet "
        f"(current directory {os.getcwd()}). Index documents first (`rag-pack index PATH`), "
        "or check --uri/--collection."
    )


def wants_routing(args: argparse.Namespace) -> bool:
    """True when ``ask``/``chat`` route between sources (``--route``, ``--routes``,
    ``--router`` or ``--mode route``)."""
    flags = ("route", "routes", "router")
    return any(getattr(args, f, None) for f in flags) or getattr(args, "mode", None) == "route"


def check_input(args: argparse.Namespace, routed: bool) -> str:
    """Check ``--uri`` (and that a Milvus Lite database exists) before anything loads; returns
    the uri in use."""
    from llama_index_rag_pack.models.settings import default_collection, default_milvus_uri

    uri = args.uri or default_milvus_uri()
    check_uri(uri)
    if routed:
        if getattr(args, "routes", None):
            from llama_index_rag_pack.pack.sources import load_sources

            load_sources(args.routes)
        router = getattr(args, "router", None)
        if router and not Path(router).is_file():
            raise ConfigurationError(
                f"No saved router at {router}: save one with `rag-pack route --save-router FILE`."
            )
        check_index_exists(uri, None)
    else:
        check_index_exists(uri, args.collection or default_collection())
    return uri
