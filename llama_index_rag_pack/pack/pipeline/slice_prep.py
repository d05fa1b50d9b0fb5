"""An insert written slice by slice, with the BM25 analysis of each slice after the first done
by a helper process (:mod:`~llama_index_rag_pack.documents.analysis_worker`) while the slice
before it is embedded and stored. The helper runs the same analysis on the same values, so the
rows are the ones the pack writes alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.analysis_worker import start_worker, worker_enabled
from llama_index_rag_pack.documents.bm25_analysis import resolve_analyzer
from llama_index_rag_pack.documents.language_analysis import LanguageAnalyzer
from llama_index_rag_pack.milvus.bm25.bm25_rows import chunks_to_analyse, node_text
from llama_index_rag_pack.milvus.lite_engine.fast_paths import release_arrow_memory
from llama_index_rag_pack.pack import indexing

__all__ = ["helper_analysis", "write_slices"]


def helper_analysis(store: Any) -> str | None:
    """The name of ``store``'s client-side BM25 analysis when a helper process can rebuild it
    from that name (not a custom callable), else ``None``."""
    analysis = getattr(store, "bm25_analysis", None)
    if analysis is None or not analysis.client_side or analysis.name.startswith("custom:"):
        return None
    try:
        rebuilt = resolve_analyzer(analysis.name).analyzer
    except ConfigurationError:
        return None
    given = analysis.analyzer
    if given is rebuilt or (  # a function (english_terms), or the same language analysis
        type(given) is type(rebuilt) is LanguageAnalyzer and vars(given) == vars(rebuilt)
    ):
        return analysis.name
    return None


def write_slices(pack: Any, documents: Sequence[Any], *, replace: bool = True) -> int:
    """Write ``documents`` slice by slice (:func:`~llama_index_rag_pack.pack.indexing.
    document_slices`, :func:`~llama_index_rag_pack.pack.indexing.write_slice`); the chunks
    written. With more than one slice, slice ``i + 1`` is chunked and handed to the analysis
    helper before slice ``i`` is embedded and stored; the first slice, and every slice once the
    helper is gone or fails on one, is analysed here."""
    store = pack.vector_store
    slices = list(indexing.document_slices(documents, pack.tenant_field))
    name = helper_analysis(store) if len(slices) > 1 and worker_enabled() else None
    worker = start_worker(name) if name is not None else None
    written = 0
    try:
        nodes = indexing.chunk_slice(pack, slices[0]) if slices else []
        found = None
        for i, part in enumerate(slices):
            following = indexing.chunk_slice(pack, slices[i + 1]) if i + 1 < len(slices) else None
            if following is not None and worker is not None:
                texts = [node_text(store, node) for node in following]
                worker.submit(chunks_to_analyse(following, texts))
            written += indexing.write_slice(
                pack, part, nodes=nodes, found=found, check_language=not written, replace=replace
            )
            release_arrow_memory()  # what Lite's writes of the slice freed
            found = worker.result() if following is not None and worker is not None else None
            if found is not None and len(found) != len(following or ()):  # never: analysed here
                found = None
            nodes = following or []
    finally:
        if worker is not None:
            worker.close()
    return written
