"""Peer side of bench_citations_streaming.py: langchain-references 1.0.0, in its own venv.

Not a benchmark of its own and not meant to be run by hand: ``bench_citations_streaming.py``
starts it with the peer venv's Python (made by ``benchmarks/make_peer_venv.sh lcref PATH``),
passes recorded token streams as JSON on stdin and reads timings, outputs and the peer's own
Python and package versions as JSON on stdout. It drives the peer's state machine exactly as
its own ``_update_references`` does (feed every token, flush with empty chunks while output
comes, then ``None``), with its ``TextReferenceStyle``; tokens are passed as ``str``, which the
peer accepts. The failure cases also go through the loop of its async path
(``_aupdate_references``, no flush).
"""

from __future__ import annotations

import json
import sys
import time

import langchain_references
from _results import runtime_info
from langchain_core.documents import Document
from langchain_core.messages import AIMessageChunk
from langchain_references import TextReferenceStyle
from langchain_references.references import _manage_references


def run(tokens: list[str], docs: list[Document]) -> str:
    fsm = _manage_references(style=TextReferenceStyle(), medium=docs)
    fsm.send(None)
    out: list[str] = []
    chunk = None
    for token in tokens:
        chunk = fsm.send(token)
        if chunk:
            out.append(chunk.content)
    while chunk:
        chunk = fsm.send(AIMessageChunk(content=""))
        if chunk:
            out.append(chunk.content)
    chunk = fsm.send(None)
    if chunk:
        out.append(chunk.content)
    return "".join(out)


def run_async_driver(tokens: list[str], docs: list[Document]) -> str:
    """The loop of the peer's async path (``_aupdate_references``): no flush before ``None``."""
    fsm = _manage_references(style=TextReferenceStyle(), medium=docs)
    fsm.send(None)
    out: list[str] = []
    for token in tokens:
        chunk = fsm.send(token)
        if chunk:
            out.append(chunk.content)
    chunk = fsm.send(None)
    if chunk:
        out.append(chunk.content)
    return "".join(out)


def main() -> None:
    job = json.load(sys.stdin)
    docs = [Document(page_content=d["text"], metadata=d["metadata"]) for d in job["docs"]]
    result: dict = {
        "version": langchain_references.__version__,
        "runtime": runtime_info(["langchain-references", "langchain-core"]),
        "timings": {},
        "outputs": {},
    }
    for name, streams in job["timed"].items():
        best = float("inf")
        per_token: list[float] = []
        for _ in range(job["repeats"]):
            start = time.perf_counter()
            for tokens in streams:
                run(tokens, docs)
            best = min(best, time.perf_counter() - start)
        if job.get("per_token") and name in job["per_token"]:
            for tokens in streams[: job["per_token_streams"]]:
                fsm = _manage_references(style=TextReferenceStyle(), medium=docs)
                fsm.send(None)
                for token in tokens:
                    t0 = time.perf_counter_ns()
                    fsm.send(token)
                    per_token.append(time.perf_counter_ns() - t0)
        result["timings"][name] = {"seconds": best, "per_token_ns": per_token}
    for name, tokens in job["cases"].items():
        try:
            result["outputs"][name] = run(tokens, docs)
        except Exception as e:  # noqa: BLE001 - a crash is a result here
            result["outputs"][name] = f"<crash: {type(e).__name__}: {e}>"
        try:
            result["outputs"][f"{name}#async"] = run_async_driver(tokens, docs)
        except Exception as e:  # noqa: BLE001
            result["outputs"][f"{name}#async"] = f"<crash: {type(e).__name__}: {e}>"
    for name, streams in job["timed"].items():
        result["outputs"][f"{name}#first"] = run(streams[0], docs)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
