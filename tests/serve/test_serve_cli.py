"""``rag-pack serve http`` as users start it: a real process with the offline defaults (the
bundled embedding model, the bundled local LLM, Milvus Lite), answering the official ``openai``
client streamed and not; and its one-line errors (a taken port, an unreadable key file, keys
that do not fit the collection). Keys from files and the environment.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from lite_server import free_port, wait_for

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.serve.keys import KEYS_ENV, AccessDenied, KeyRing

RAG_PACK = shutil.which("rag-pack") or str(Path(sys.executable).parent / "rag-pack")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAG_PACK_LLM"))}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def indexed(indexed_articles: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Lite database with the articles, indexed by ``rag-pack index`` in its own process."""
    target = tmp_path_factory.mktemp("served") / "served.db"
    shutil.copytree(indexed_articles, target)
    return str(target)


@pytest.fixture()
def server(indexed: str, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [RAG_PACK, "--uri", indexed, "--collection", "facts", "serve", "http"]
        + ["--port", str(port), "--api-key", "k1"],
        env={**_env(), KEYS_ENV: "k2, k3"},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            return httpx.get(f"{url}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    wait_for(healthy, "rag-pack serve to answer /healthz")
    yield url, proc
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.mark.slow
@pytest.mark.integration
def test_rag_pack_serve_http_with_the_offline_defaults(server: Any) -> None:
    url, proc = server
    assert httpx.get(f"{url}/").text.startswith("<!doctype html>")
    assert "renderAnswer" in httpx.get(f"{url}/static/app.js").text
    question = [{"role": "user", "content": "What does the aardvark eat?"}]
    for key in ("k1", "k3"):  # from --api-key and from $RAG_PACK_API_KEYS
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
        whole = client.chat.completions.create(model="hybrid_convex", messages=question)
    text = whole.choices[0].message.content
    assert "termites" in text and "[1]" in text  # the bundled model's answer quotes the passage
    chunks = list(client.chat.completions.create(model="vector", messages=question, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "termites" in streamed
    assert any(s["cited"] for s in chunks[-1].model_extra["sources"])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="k4", max_retries=0).models.list()
    assert httpx.get(f"{url}/healthz").json()["ready"] is True
    proc.send_signal(signal.SIGINT)  # Ctrl-C stops it cleanly
    assert proc.wait(timeout=30) == 0


def test_one_line_errors_of_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--uri", str(tmp_path / "x.db"), "serve", "http", "--port", str(port)]) == 2
    assert "Cannot listen on 127.0.0.1" in capsys.readouterr().err
    missing = str(tmp_path / "no-such-keys.txt")
    assert main(["serve", "http", "--api-key-file", missing]) == 2
    assert "Cannot read the API key file" in capsys.readouterr().err
    assert main(["serve", "http", "--api-key", "a b"]) == 2
    assert "whitespace" in capsys.readouterr().err
    assert main(["serve", "mcp", "--max-concurrent", "0"]) == 2
    assert "max_concurrent" in capsys.readouterr().err


def test_keys_from_a_file_the_environment_and_options(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# team keys\nfile-key=acme  # the acme team\n\n  other-key\n", "utf-8")
    ring = KeyRing.gather(["opt-key=*"], files=[keys], environ={KEYS_ENV: "env-a,env-b=globex"})
    assert dict(ring.tenants) == {
        "opt-key": "*",
        "file-key": "acme",
        "other-key": None,
        "env-a": None,
        "env-b": "globex",
    }
    assert ring.tenant_of("file-key", has_tenants=True) == "acme"
    assert ring.tenant_of("opt-key", has_tenants=True) == "*"
    assert ring.tenant_of("other-key", has_tenants=False) is None
    for token, status in (("other-key", 403), (None, 401), ("file-ke", 401), ("", 401)):
        with pytest.raises(AccessDenied) as denied:
            ring.tenant_of(token, has_tenants=True)
        assert denied.value.status == status
    assert KeyRing().tenant_of(None, has_tenants=False) is None  # no keys: open
    with pytest.raises(AccessDenied):
        KeyRing().tenant_of(None, has_tenants=True)
    for bad in (["=acme"], ["k="], ["a=1", "a=2"]):
        with pytest.raises(ConfigurationError):
            KeyRing.parse(bad)
    with pytest.raises(ConfigurationError, match="no tenants"):
        ring.check_collection(has_tenants=False)


def test_a_server_gives_the_local_llm_every_core_unless_told(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RAG_PACK_LLM_THREADS", raising=False)
    assert main(["serve", "mcp", "--max-concurrent", "0"]) == 2  # fails after the choice
    assert os.environ["RAG_PACK_LLM_THREADS"] == str(len(os.sched_getaffinity(0)))
    monkeypatch.setenv("RAG_PACK_LLM_THREADS", "3")
    assert main(["serve", "mcp", "--max-concurrent", "0"]) == 2
    assert os.environ["RAG_PACK_LLM_THREADS"] == "3"  # the user's setting stands
