"""Whether Milvus Lite is installed, and the one-line error when a local ``*.db`` path needs it.

Milvus Lite has no Windows build, so the package installs without it there (``milvus-lite``
carries the marker ``sys_platform != 'win32'``) and only a Milvus server uri works. Shared by the
Milvus client's checks and the command line's, which fail before anything loads.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

__all__ = ["lite_installed", "lite_missing_message"]


def lite_installed() -> bool:
    """Whether Milvus Lite (the ``milvus-lite`` package) is installed: it has no Windows build,
    so the package installs without it there and only a server uri works."""
    import importlib.util

    return importlib.util.find_spec("milvus_lite") is not None


def lite_missing_message(uri: str) -> str:
    """The one-line error for a Milvus Lite path ``uri`` when Milvus Lite is not installed."""
    return (
        f"{uri!r} is a Milvus Lite database, but Milvus Lite is not installed (it has no "
        "Windows build). Point the pack at a Milvus server instead: uri='http://127.0.0.1:19530' "
        "(--uri; docs/milvus.md has the Docker command), or on Linux and macOS "
        "`pip install milvus-lite`."
    )
