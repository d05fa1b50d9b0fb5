"""Fixtures of the rerank tests: ``rerank_server`` (module), a fake rerank server on 127.0.0.1
(:mod:`fake_rerank_server`) whose recorded requests are cleared before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_rerank_server import FakeRerankServer


@pytest.fixture(scope="module")
def rerank_server_module() -> Iterator[FakeRerankServer]:
    server = FakeRerankServer()
    yield server
    server.stop()


@pytest.fixture()
def rerank_server(rerank_server_module: FakeRerankServer) -> FakeRerankServer:
    rerank_server_module.requests.clear()
    return rerank_server_module
