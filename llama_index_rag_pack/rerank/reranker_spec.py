"""``rerank=``: from what a user writes to a reranker.

* ``"http://HOST:PORT[/PATH][#MODEL]"`` (or ``tei+http://...``, ``cohere+http://...``): an
  :class:`~llama_index_rag_pack.rerank.EndpointReranker`;
* ``"local:DIR"``: a :class:`~llama_index_rag_pack.rerank.CrossEncoderReranker`;
* a LlamaIndex node postprocessor: itself.

Example:
    >>> make_reranker("tei+http://127.0.0.1:8080").describe()
    'rerank endpoint http://127.0.0.1:8080/rerank (tei)'
    >>> make_reranker("ftp://example")
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: rerank='ftp://example' is neither an http(s) URL of a rerank endpoint (http://HOST:PORT[/PATH][#MODEL]) nor local:DIR (a cross-encoder's directory).
"""  # noqa: E501  (doctest output is one line)

from __future__ import annotations

from typing import Any

from llama_index.core.postprocessor.types import BaseNodePostprocessor

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["LOCAL_PREFIX", "OPTION_NAMES", "describe_reranker", "make_reranker"]

LOCAL_PREFIX = "local:"
#: The options a reranker made from a string takes (``rerank_options=`` of a pack).
OPTION_NAMES = frozenset(
    {"top_n", "batch_size", "fallback", "timeout", "api_key_env", "max_response_bytes", "device"}
)
_ENDPOINT_ONLY = frozenset({"timeout", "api_key_env", "max_response_bytes"})


def make_reranker(rerank: Any, **options: Any) -> BaseNodePostprocessor:
    """The reranker ``rerank`` names (``options``: ``top_n``, ``batch_size``, ``fallback``, and
    ``timeout``, ``api_key_env``, ``max_response_bytes`` for an endpoint, ``device`` for a local
    model).

    Raises:
        ConfigurationError: neither an address, ``local:DIR`` nor a node postprocessor; an
            unknown option; a bad value.
    """
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise ConfigurationError(
            f"Unknown rerank option {unknown[0]!r}; valid: {', '.join(sorted(OPTION_NAMES))}."
        )
    if isinstance(rerank, BaseNodePostprocessor):
        return rerank
    if not isinstance(rerank, str) or not rerank.strip():
        raise ConfigurationError(
            "rerank must be a rerank endpoint's URL, local:DIR or a LlamaIndex node "
            f"postprocessor, got {rerank!r}."
        )
    spec = rerank.strip()
    if spec.startswith(LOCAL_PREFIX):
        from llama_index_rag_pack.rerank.cross_encoder import CrossEncoderReranker

        kept = {k: v for k, v in options.items() if k not in _ENDPOINT_ONLY}
        return CrossEncoderReranker(path=spec[len(LOCAL_PREFIX) :], **kept)
    from pydantic import ValidationError

    from llama_index_rag_pack.rerank.endpoint_reranker import EndpointReranker

    try:
        return EndpointReranker(
            endpoint=spec, **{k: v for k, v in options.items() if k != "device"}
        )
    except ValidationError as e:  # a bad option value: one line naming it
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "option"
        raise ConfigurationError(
            f"rerank option {where}={first.get('input')!r}: {first.get('msg')}."
        ) from None


def describe_reranker(reranker: Any) -> str:
    """One line naming ``reranker`` (its ``describe()``, else its class)."""
    describe = getattr(reranker, "describe", None)
    return describe() if callable(describe) else type(reranker).__name__
