"""How deeply a parsed value may nest: untrusted JSON can nest thousands of levels, and reading,
comparing or printing it recursively would raise (``core.llm_output`` measures it without
recursion)."""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

__all__ = ["MAX_JSON_DEPTH"]

MAX_JSON_DEPTH = 32
