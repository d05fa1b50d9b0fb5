"""What every example shares: its command line and its LLM.

By default an example runs offline with a scripted LLM that answers from the context it is given
(it cites the first passage and repeats its first sentence), so every script runs anywhere in
seconds. ``--real-llm`` uses the LLM the pack resolves instead: ``RAG_PACK_LLM`` / OpenAI / an
OpenAI-compatible server / the bundled local GGUF model.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from llama_index.core import Document

__all__ = ["SAMPLE_DOCS", "example_llm", "parse_args"]

SAMPLE_DOCS = [
    Document(
        text="Milvus is an open-source vector database built for AI applications. It supports "
        "dense, sparse and hybrid search, and scales from a laptop (Milvus Lite) to a cluster.",
        metadata={"title": "Milvus", "url": "https://milvus.io"},
    ),
    Document(
        text="RAPTOR recursively clusters document chunks and summarises each cluster, building a "
        "tree that can be searched at every level of abstraction.",
        metadata={"title": "RAPTOR", "url": "https://arxiv.org/abs/2401.18059"},
    ),
    Document(
        text="Sourdough bread rises because wild yeast and lactic acid bacteria ferment the "
        "flour, releasing carbon dioxide that the gluten network traps.",
        metadata={"title": "Sourdough", "url": "https://en.wikipedia.org/wiki/Sourdough"},
    ),
]


def parse_args(doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument(
        "--real-llm",
        action="store_true",
        help="use the LLM the pack resolves (OpenAI, a compatible server, the local GGUF model) "
        "instead of the scripted one",
    )
    parser.add_argument(
        "--data-dir", default="./rag_pack_data", help="where the Milvus Lite files go"
    )
    return parser.parse_args()


def _scripted_reply(prompt: str) -> str:
    """What a careful model would answer: a summary, a standalone question, or an answer citing
    the first context passage with its first sentence."""
    if "Standalone question:" in prompt:  # chat: "it" is what the conversation was about
        history, last = prompt.split("Last message:", 1)
        message = last.split("\n", 1)[0].strip()
        titles = [d.metadata["title"] for d in SAMPLE_DOCS if d.metadata["title"] in history]
        if titles:
            subject = max(titles, key=history.rfind)
            message = re.sub(r"\bit\b", subject, message)
        return f"Standalone question: {message}"
    passages = re.findall(r"<document id=(\d+)[^>]*>\n(.*?)\n</document>", prompt, re.S)
    if passages:
        first_id, text = passages[0]
        return f"{_first_sentence(text)} [1](id={first_id})."
    if "Context information is below" in prompt:  # core's QA prompt: no markers to write
        context = prompt.split("---------------------", 2)[1]
        lines = [x for x in context.splitlines() if x.strip() and not re.match(r"^\w+: ", x)]
        return _first_sentence(lines[0]) + "." if lines else "The context says nothing on it."
    if "summar" in prompt.lower():
        body = prompt.split("\n\n", 1)[-1]
        return " ".join(body.split()[:40])
    return "I can only answer from the documents I am given."


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0].rstrip(".")


def example_llm(args: argparse.Namespace) -> Any:
    """The scripted LLM, or with ``--real-llm`` the one the pack resolves."""
    if args.real_llm:
        from llama_index_rag_pack.models.settings import resolve_llm

        return resolve_llm(None)
    from llama_index_rag_pack.testing import ScriptedLLM

    return ScriptedLLM(replies=_scripted_reply)
