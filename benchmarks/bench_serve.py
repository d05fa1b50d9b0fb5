"""``rag-pack serve http`` with the offline defaults (bundled embedding model, bundled local LLM,
Milvus Lite): how soon it answers ``/healthz``, how soon a streamed answer's first content chunk
arrives on a warm server, and 32 concurrent streamed chats over two tenants.

The shipped Wikipedia demo articles are indexed once into a collection with tenants (``acme``:
the first four articles, ``globex``: the other four). Each server is a real ``rag-pack serve
http`` process on 127.0.0.1 with a key per tenant.

* start: from ``Popen`` to the first 200 of ``/healthz`` (models load in the background), and to
  ``"ready": true``; ``--starts`` runs.
* first chunk: on a warm server (ready, one question answered), the time from sending a streamed
  chat completion to its first non-empty content delta, per answer style (``auto``: extractive
  with the bundled 135M model; ``generative``: the model writes the answer).
* load: ``--concurrent`` streamed chats sent at once with the official ``openai`` async client,
  alternating the two tenants' keys and the demo questions; errors, tenant crossings (a source
  whose ``tenant`` is not the key's), latency and first-chunk percentiles.

Run:  python benchmarks/bench_serve.py [--starts 5] [--concurrent 32] \
          [--screenshot docs/serve_page.png]

Writes ``serve.json`` and ``serve.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai
from _results import add_out_argument, md_table, write_results

from llama_index_rag_pack.cli.app import DEMO_TITLES

RAG_PACK = shutil.which("rag-pack") or str(Path(sys.executable).parent / "rag-pack")
TITLES = DEMO_TITLES  # the articles `rag-pack demo` indexes
TENANT_OF = {title: ("acme" if i < 4 else "globex") for i, title in enumerate(TITLES)}
QUESTIONS = {
    "acme": ("Who were the astronauts of Apollo 11?", "What does the aardvark eat?"),
    "globex": ("Who wrote Animal Farm?", "How deep is the Atlantic Ocean?"),
}
KEYS = {"acme": "bench-acme", "globex": "bench-globex"}


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def build_index(uri: str) -> None:
    code = (
        "from llama_index_rag_pack import RagPack\n"
        "from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents\n"
        f"tenant_of = {TENANT_OF!r}\n"
        f"docs = load_wikipedia_documents({list(TITLES)!r})\n"
        "for d in docs:\n"
        "    d.metadata['tenant'] = tenant_of[d.metadata['title']]\n"
        f"RagPack(docs, uri={uri!r}, collection_name='served', tenant_field='tenant', "
        "overwrite=True, llm='none')\n"
    )
    subprocess.run([sys.executable, "-c", code], env=_env(), check=True, timeout=1800)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, uri: str, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        keys = [a for t, k in KEYS.items() for a in ("--api-key", f"{k}={t}")]
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [RAG_PACK, "--uri", uri, "--collection", "served", "serve", "http"]
            + ["--port", str(self.port), *keys, *extra],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _health(self) -> dict[str, Any] | None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the server exited: {self.proc.stderr.read()[-2000:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=5).json()
        except httpx.TransportError:
            return None

    def wait(self, ready: bool) -> float:
        while True:
            health = self._health()
            if health and (health["ready"] or not ready):
                return time.perf_counter() - self.started
            time.sleep(0.05)  # as a supervisor polls: a busy loop would slow the start it times

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def streamed_chat(url: str, tenant: str, question: str) -> dict[str, Any]:
    """One streamed chat: total and first-chunk seconds, the text, the sources' tenants."""
    async with openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key=KEYS[tenant], max_retries=0, timeout=600
    ) as client:
        start = time.perf_counter()
        first = None
        text, tenants = "", set()
        stream = await client.chat.completions.create(
            model="hybrid_convex",
            messages=[{"role": "user", "content": question}],
            stream=True,
        )
        async for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta.content or ""
                if delta and first is None:
                    first = time.perf_counter() - start
                text += delta
            else:
                tenants = {s["metadata"].get("tenant") for s in chunk.model_extra["sources"]}
    return {
        "tenant": tenant,
        "seconds": time.perf_counter() - start,
        "first_chunk_s": first,
        "chars": len(text),
        "crossed": sorted(t for t in tenants if t != tenant),
    }


def first_chunks(url: str, repeats: int) -> list[float]:
    asyncio.run(streamed_chat(url, "acme", QUESTIONS["acme"][0]))  # warm: one answer first
    times = []
    for _ in range(repeats):
        for tenant, questions in QUESTIONS.items():
            for question in questions:
                times.append(asyncio.run(streamed_chat(url, tenant, question))["first_chunk_s"])
    return times


async def load(url: str, concurrent: int) -> dict[str, Any]:
    async def one(i: int) -> Any:
        tenant = ("acme", "globex")[i % 2]
        return await streamed_chat(url, tenant, QUESTIONS[tenant][(i // 2) % 2])

    start = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(concurrent)), return_exceptions=True)
    wall = time.perf_counter() - start
    done = [r for r in results if isinstance(r, dict)]
    errors = [repr(r) for r in results if not isinstance(r, dict)]
    return {
        "concurrent": concurrent,
        "wall_s": wall,
        "errors": errors,
        "crossings": sum(bool(r["crossed"]) for r in done),
        "seconds": [r["seconds"] for r in done],
        "first_chunk_s": [r["first_chunk_s"] for r in done if r["first_chunk_s"] is not None],
        "empty_answers": sum(r["chars"] == 0 for r in done),
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


def screenshot(url: str, path: str) -> None:
    """The page after a question, its first citation opened (Debian's chromium, Selenium)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,820"):
        options.add_argument(flag)
    options.add_argument("--disable-background-networking")
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    try:
        wait = WebDriverWait(driver, 300)
        driver.get(url + "/")
        wait.until(ec.visibility_of_element_located((By.ID, "key"))).send_keys(KEYS["acme"])
        driver.find_element(By.ID, "question").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#mode option"))
        driver.find_element(By.ID, "question").send_keys(QUESTIONS["acme"][1])
        driver.find_element(By.ID, "ask").click()
        turn = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".turn[data-done]")))
        turn.find_element(By.CSS_SELECTOR, "button.cite").click()
        wait.until(ec.visibility_of_element_located((By.ID, "passage")))
        driver.save_screenshot(path)
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5, help="server starts timed")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of first-chunk questions")
    parser.add_argument("--concurrent", type=int, default=32, help="streamed chats at once")
    parser.add_argument("--screenshot", default=None, help="save a screenshot of the page here")
    add_out_argument(parser)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    uri = str(workdir / "served.db")
    build_index(uri)
    results: dict[str, Any] = {"starts": [], "first_chunk": {}, "load": {}}
    for _ in range(args.starts):
        server = Server(uri)
        try:
            healthz = server.wait(False)
            results["starts"].append({"healthz_s": healthz, "ready_s": server.wait(True)})
        finally:
            server.stop()
    for style in ("auto", "generative"):
        server = Server(uri, "--answer-style", style)
        try:
            server.wait(True)
            results["first_chunk"][style] = first_chunks(server.url, args.repeats)
            results["load"][style] = asyncio.run(load(server.url, args.concurrent))
            if style == "auto" and args.screenshot:
                screenshot(server.url, args.screenshot)
        finally:
            server.stop()
    write(results, args)
    shutil.rmtree(workdir, ignore_errors=True)


def write(results: dict[str, Any], args: argparse.Namespace) -> None:
    starts = results["starts"]
    start_rows = [
        [
            "to /healthz 200",
            f"{statistics.median(s['healthz_s'] for s in starts):.2f}",
            f"{max(s['healthz_s'] for s in starts):.2f}",
        ],
        [
            'to "ready" (models loaded)',
            f"{statistics.median(s['ready_s'] for s in starts):.2f}",
            f"{max(s['ready_s'] for s in starts):.2f}",
        ],
    ]
    first_rows = [
        [style, len(t), f"{statistics.median(t):.2f}", f"{max(t):.2f}"]
        for style, t in results["first_chunk"].items()
    ]
    load_rows = []
    for style, run in results["load"].items():
        load_rows.append(
            [
                style,
                run["concurrent"],
                len(run["errors"]),
                run["crossings"],
                run["empty_answers"],
                f"{run['wall_s']:.1f}",
                f"{_pct(run['first_chunk_s'], 0.5):.2f} / {_pct(run['first_chunk_s'], 0.95):.2f}",
                f"{_pct(run['seconds'], 0.5):.2f} / {_pct(run['seconds'], 0.95):.2f}",
                f"{run['concurrent'] / run['wall_s']:.2f}",
            ]
        )
    tables = [
        (
            f"{args.concurrent} concurrent streamed chats over two tenants",
            md_table(
                [
                    "answer style",
                    "chats",
                    "errors",
                    "tenant crossings",
                    "empty answers",
                    "wall s",
                    "first chunk p50 / p95 s",
                    "whole answer p50 / p95 s",
                    "answers / s",
                ],
                load_rows,
                "lrrrrrrrr",
            ),
        ),
        (
            "First content chunk of a streamed answer, warm server, one at a time",
            md_table(["answer style", "answers", "median s", "max s"], first_rows, "lrrr"),
        ),
        (
            f"Server start ({len(starts)} starts)",
            md_table(["from Popen", "median s", "max s"], start_rows, "lrr"),
        ),
    ]
    notes = [
        "The offline defaults: bundled all-MiniLM-L6-v2 (ONNX Runtime), bundled SmolLM2-135M on "
        "llama.cpp (4 parallel slots), Milvus Lite; mode hybrid_convex. `auto` answers "
        "extractively with the bundled model (the passages' own sentences, cited); `generative` "
        "has the model write the answer. Each server is a `rag-pack serve http` process.",
    ]
    write_results(
        "serve",
        results,
        tables,
        out=args.out,
        description=__doc__.split("\n\n")[0],
        notes=notes,
        headline_packages=("starlette", "uvicorn", "mcp", "openai"),
    )
    for title, table in tables:
        print(f"\n{title}\n{table}")


if __name__ == "__main__":
    main()
