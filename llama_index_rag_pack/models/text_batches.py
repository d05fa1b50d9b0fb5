"""Batches of texts embedded in order of length, so a run pads little: the order and its
inverse (pure functions)."""

from __future__ import annotations

from typing import Any

__all__ = ["by_length", "in_order"]


def by_length(texts: list[str]) -> list[int]:
    """Positions of ``texts``, shortest text first (stable)."""
    return sorted(range(len(texts)), key=lambda i: len(texts[i]))


def in_order(order: list[int], vectors: list[Any]) -> list[Any]:
    """``vectors`` (computed in ``order``) put back in the original positions."""
    out: list[Any] = [None] * len(order)
    for position, vector in zip(order, vectors, strict=True):
        out[position] = vector
    return out
