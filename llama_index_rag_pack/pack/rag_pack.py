"""``RagPack``: the pack that wires the components together over Milvus."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.pack.modes import RetrievalMode
from llama_index_rag_pack.pack.pack_base import RagPackBase
from llama_index_rag_pack.pack.routed import RoutedRagPack

__all__ = ["RagPack", "RetrievalMode"]


class RagPack(RagPackBase):
    """Advanced RAG over Milvus in one object: index documents, retrieve, answer.

    Built from documents (indexes them) or from an existing collection (reopens it without
    re-indexing). Every part is injectable; missing ones come from
    :mod:`~llama_index_rag_pack.models.settings`: the bundled all-MiniLM-L6-v2 embeddings,
    Milvus Lite in ``./rag_pack_data/milvus.db`` and the LLM resolution order (explicit →
    OpenAI / compatible server → local GGUF).

    Args:
        documents: Documents to index now (blank ones are skipped with a warning).
        input_dir: A file or directory to read and index (txt, md, pdf, html).
        llm: LLM object, or ``"openai"``/``"local"``/a ``.gguf`` path; resolved lazily on first use.
        embed_model: Embedding model object or a local model path.
        vector_store: A ready ``MilvusVectorStore`` (then ``uri``/``collection_name`` are ignored).
        uri: Milvus Lite path (``*.db``) or server address ``http://host:19530``.
        collection_name: Collection to index into / reopen.
        token: Token for a Milvus server.
        overwrite: Drop the collection before indexing.
        chunk_size: Chunk size in tokens (256 fits MiniLM's input window).
        chunk_overlap: Overlap between chunks, in tokens.
        similarity_top_k: Chunks retrieved per query.
        enable_bm25: Keep a BM25 sparse field beside the dense vectors (hybrid search).
        bm25_analyzer: A new collection's BM25 analysis: ``auto`` (each chunk in its own
            language; docs/languages.md), a language (``chinese``, ``german``, ...),
            ``english``, ``standard`` or a callable ``text -> terms``; others keep theirs.
        bm25_vectors: Where a new collection's BM25 vectors come from: ``auto`` (Milvus' BM25
            function on Lite and 2.5+, vectors the pack computes on 2.4, none on 2.3: dense
            modes only, with a warning), ``function`` or ``client`` (docs/milvus.md).
        sentence_index: Also embed every sentence (headed by its document's title) into
            ``<collection>__sentences``, so hybrid search scores a chunk by its best sentence.
        sentence_vectors: How the sentence index gets its vectors: ``separate`` (a pass per
            sentence, the default; ``RAG_PACK_SENTENCE_VECTORS`` sets another default) or
            ``pooled`` (from each chunk's own pass, for the bundled model on ONNX Runtime:
            indexing 1.7x faster, the default mode's evidence@1 lower with the shipped fusion
            weights; ``benchmarks/results/sentence_vectors.md``).
        fusion_config: Defaults of the hybrid modes: a ``FusionConfig`` or the path of one saved
            by ``rag-pack eval --fit``; unset: ``<data_dir>/fusion.json`` when it exists, else
            the built-in defaults. Arguments of ``retriever(mode, ...)`` override it.
        tenant_field: The metadata key that keeps tenants apart (docs/filters.md).
        rerank: A second stage after every mode, the chat engine included (docs/rerank.md): the
            URL of a ``/rerank`` endpoint (``http://HOST:PORT[/PATH][#MODEL]``, TEI, vLLM,
            Infinity, Jina or Cohere; ``tei+``/``cohere+`` picks the API), ``local:DIR`` (a
            saved sentence-transformers CrossEncoder) or a LlamaIndex node postprocessor.
        rerank_top_n: Candidates the reranker sees per query (default 4 x ``top_k``).
        rerank_fallback: ``"raise"`` (a failed rerank is a ``RerankError``) or ``"keep"`` (a
            warning, and the first-stage order).
        rerank_options: ``batch_size`` (documents per request, 32), ``timeout`` (seconds,
            30), ``api_key_env`` (``RAG_PACK_RERANK_API_KEY``), ``max_response_bytes``.
        show_progress: Progress bars while indexing.
        flush: Flush after indexing ``documents`` (``False``: the caller calls :meth:`flush`
            after further inserts; Milvus Lite seals a segment at every flush and scores BM25
            in each segment apart, so a collection written in many small flushed inserts loses
            its in-memory BM25 copy).
        callback_manager: Passed to the index and query engines.

    Example:
        >>> from llama_index.core import Document
        >>> pack = RagPack(  # doctest: +SKIP
        ...     [Document(text="Milvus is a vector database.")], uri="./demo.db"
        ... )
        >>> print(pack.run("What is Milvus?"))  # doctest: +SKIP
    """

    @classmethod
    def from_sources(cls, sources: Sequence[Any], **kwargs: Any) -> RoutedRagPack:
        """A pack over several named sources (collections) that routes every question between them.

        See :class:`~llama_index_rag_pack.RoutedRagPack` for ``sources`` and options.
        """
        return RoutedRagPack(sources, **kwargs)
