"""How deeply a parsed value nests, measured without recursion (untrusted JSON can nest
thousands of levels: reading, comparing or printing it recursively would raise)."""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_JSON_DEPTH", "shallow"]

MAX_JSON_DEPTH = 32


def shallow(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests at most ``limit`` containers deep (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True
