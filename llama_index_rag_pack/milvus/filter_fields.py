"""Is every field a filter expression names one the collection has? Checked before searching.

Milvus reads an unknown name in an expression as a dynamic field that no row has: the search
quietly returns nothing. ``rag-pack ask/chat/eval --filter`` refuse such a name instead, comparing
it with the collection's schema fields and the metadata keys of a sample of its rows.
"""

from __future__ import annotations

from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.connection import ensure_loaded
from llama_index_rag_pack.milvus.milvus_expr import expression_fields

__all__ = ["SAMPLE_ROWS", "check_filter_fields"]

#: Rows whose metadata keys count as the collection's fields.
SAMPLE_ROWS = 500


def check_filter_fields(client: Any, collection: str, expr: str | None, *, what: str) -> None:
    """Raise :class:`ConfigurationError` when ``expr`` is malformed or names a field no row of
    ``collection`` has; ``what`` names the expression in the message (e.g. ``"--filter"``)."""
    names = expression_fields(expr) if expr else set()
    if not names:
        return
    known = _known_fields(client, collection)
    unknown = sorted(names - known)
    if unknown:
        raise ConfigurationError(
            f"{what} names {', '.join(map(repr, unknown))}, which no chunk of collection "
            f"{collection!r} has (its fields: {', '.join(sorted(known))})."
        )


def _known_fields(client: Any, collection: str) -> set[str]:
    info = client.describe_collection(collection)
    known = {str(f.get("name")) for f in info.get("fields", [])}
    ensure_loaded(client, collection)
    for row in client.query(collection, filter="", output_fields=["*"], limit=SAMPLE_ROWS):
        known.update(k for k in row if not k.startswith("$"))
    return known
