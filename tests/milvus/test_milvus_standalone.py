"""The storage contract on a real Milvus standalone server: the Go/C++ Milvus 2.3.5 that the
``milvus`` wheel ships (no sparse vectors, no BM25 function), started here on loopback ports in a
temporary directory. Skipped, with the reason printed, only where that wheel does not exist.

Covers: capabilities detected; a default ``RagPack`` created for dense search with one warning
line; dense and default retrieval, filters, tenants, delete and reopen; BM25 modes refused in one
line naming the version; a collection the server cannot serve (what older versions of the pack
left behind) refused before it is loaded; nothing left behind by a refused creation; a server
restart mid-session; and the server alive at the end.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from llama_index_rag_pack.core.errors import (
    ConfigurationError,
    MilvusOperationError,
    MilvusUnavailableError,
)
from llama_index_rag_pack.milvus.capabilities import detect_capabilities, forget_capabilities
from llama_index_rag_pack.milvus.connection import open_client, open_vector_store
from llama_index_rag_pack.pack.rag_pack import RagPack
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

PORT_KEYS = (
    "etcd_port",
    "proxy_port",
    "proxy_internal_port",
    "root_coord_port",
    "query_coord_port",
    "query_node_port",
    "index_coord_port",
    "index_node_port",
    "data_coord_port",
    "data_node_port",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _etcd_config(path: Path, client_port: int, peer_port: int) -> Path:
    """An embedded-etcd configuration on loopback ports (the default peer port, 2380, is fixed
    and taken by any other Milvus 2.3 running on the machine)."""
    peer = f"http://127.0.0.1:{peer_port}"
    client = f"http://127.0.0.1:{client_port}"
    path.write_text(
        "name: default\n"
        f"listen-peer-urls: {peer}\ninitial-advertise-peer-urls: {peer}\n"
        f"initial-cluster: default={peer}\n"
        f"listen-client-urls: {client}\nadvertise-client-urls: {client}\n"
    )
    return path


def _server_config_class() -> type:
    from milvus import MilvusServerConfig

    class LoopbackConfig(MilvusServerConfig):
        """The wheel's configuration plus the embedded etcd's own file (its ports)."""

        etcd_file: Path | None = None

        def resolve_all_listen_ports(self) -> None:
            # the ports are chosen once, free, and kept across a restart: the wheel's check binds
            # them without SO_REUSEADDR, which the server's own just-closed sockets would fail
            for key in PORT_KEYS:
                self.configurable_items[key][1] = int(self.configs[key])

        def update_extra_configs(self, content: str) -> str:
            content = super().update_extra_configs(content)
            if self.etcd_file is None:
                return content
            return content.replace("etcd:\n", f"etcd:\n  config:\n    path: {self.etcd_file}\n", 1)

    return LoopbackConfig


#: Server settings for a test server. A flush waits for its segment's assignments to expire (2 s
#: by default): each flush is about 1.5 s shorter. A stopped server's etcd sessions expire after
#: the session TTL (30 s by default), which a restarted server can wait for.
TEST_SETTINGS = {"dataCoord.segment.assignmentExpiration": 200, "common.session.ttl": 10}


def _unpacked_binaries() -> Path:
    """The wheel's server binaries, unpacked once per machine and version (about 6 s of LZMA
    decompression that the wheel otherwise repeats in every new data directory)."""
    import fcntl  # the wheel exists for Linux and macOS only

    import milvus

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = cache / "rag-pack-tests" / f"milvus-{milvus.__version__}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:  # one unpacker at a time (xdist workers, runs)
        fcntl.flock(lock, fcntl.LOCK_EX)
        milvus._initialize_data_files(str(root))  # skips files whose .md5 matches the archive
    return root / "bin"


class Standalone:
    """A Milvus 2.3.5 standalone server from the ``milvus`` wheel, on free loopback ports that
    stay the same across a restart."""

    def __init__(self, data_dir: Path) -> None:
        from milvus import MilvusServer

        (data_dir / "bin").symlink_to(_unpacked_binaries(), target_is_directory=True)
        ports = {key: _free_port() for key in PORT_KEYS}
        self.config = _server_config_class()(data_dir=str(data_dir), **ports)
        self.config.etcd_file = _etcd_config(
            data_dir / "etcd.yaml", ports["etcd_port"], _free_port()
        )
        for role in ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode"):
            self.config.set(f"{role}.ip", "127.0.0.1")
        for role in ("dataCoord", "dataNode"):
            self.config.set(f"{role}.ip", "127.0.0.1")
        for key, value in TEST_SETTINGS.items():
            self.config.set(key, value)
        self.server = MilvusServer(self.config)
        self.uri = f"http://127.0.0.1:{ports['proxy_port']}"

    def start(self) -> None:
        self.server.start()  # waits for /healthz (raises when the server stops or times out)

    def stop(self) -> None:
        self.server.stop()

    def alive(self) -> bool:
        proc = self.server.server_proc
        return proc is not None and proc.poll() is None


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    try:
        import milvus  # noqa: F401  (the wheel with the standalone server)
    except ImportError:
        reason = (
            "no `milvus` wheel (Milvus 2.3.5 standalone) on this platform "
            f"({sys.platform}); the server tests run on linux x86_64"
        )
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    server = Standalone(tmp_path_factory.mktemp("milvus-standalone"))
    server.start()
    yield server
    try:
        assert server.alive(), "the Milvus server died during the tests"
        client = open_client(server.uri)
        assert "2.3" in client.get_server_version()
    finally:
        server.stop()


def documents() -> list[Document]:
    texts = {
        "aardvark": "The aardvark is a nocturnal mammal of Africa. It eats ants and termites.",
        "apollo": "Apollo 11 landed on the Moon in 1969 with Armstrong, Aldrin and Collins.",
        "einstein": "Albert Einstein was born in Ulm in 1879 and developed relativity.",
        "milvus": "Milvus is an open-source vector database built for similarity search.",
    }
    return [
        Document(text=t, id_=k, metadata={"title": k, "year": 1900 + i})
        for i, (k, t) in enumerate(texts.items())
    ]


def tenant_documents() -> list[Document]:
    return [
        Document(
            text=f"{tenant} note {i}: the launch code of {tenant} is in the vault.",
            id_=f"{tenant}-{i}",
            metadata={"tenant": tenant, "n": i},
        )
        for tenant in ("acme", "globex")
        for i in range(3)
    ]


class _Warnings(logging.Handler):
    """The messages of the warnings logged while it is attached to the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def created(standalone: Standalone, embed_model: Any) -> tuple[dict[str, RagPack], list[str]]:
    """The module's two packs on the server, and the warnings their creations logged.

    ``contract``: a default pack (only the LLM given); ``tenants``: partitioned by tenant. Each
    creation mostly waits on the server (two collections loaded, a flush): they run at once."""
    root, warnings = logging.getLogger(), _Warnings()
    level = root.level
    root.setLevel(logging.WARNING)
    root.addHandler(warnings)
    try:
        with ThreadPoolExecutor(2) as pool:
            contract = pool.submit(
                RagPack,
                documents(),
                uri=standalone.uri,
                collection_name="contract",
                overwrite=True,
                embed_model=embed_model,
                llm=ScriptedLLM(),
            )
            tenants = pool.submit(
                RagPack,
                tenant_documents(),
                uri=standalone.uri,
                collection_name="tenants",
                overwrite=True,
                tenant_field="tenant",
                embed_model=embed_model,
                llm=ScriptedLLM(),
            )
            packs = {"contract": contract.result(), "tenants": tenants.result()}
    finally:
        root.removeHandler(warnings)
        root.setLevel(level)
    return packs, warnings.messages


@pytest.fixture(scope="module")
def pack(created: tuple[dict[str, RagPack], list[str]]) -> RagPack:
    return created[0]["contract"]


def test_capabilities_are_read_from_the_server(standalone: Standalone) -> None:
    forget_capabilities(standalone.uri)
    caps = detect_capabilities(open_client(standalone.uri))
    assert caps.version.startswith("v2.3")
    assert (caps.sparse_vectors, caps.bm25_function, caps.bm25) == (False, False, None)
    assert "dense modes only" in caps.describe()


def test_a_default_pack_is_created_for_dense_search_with_one_warning(
    created: tuple[dict[str, RagPack], list[str]],
) -> None:
    packs, logged = created
    pack = packs["contract"]
    warnings = [m for m in logged if "dense search only" in m]
    assert len(warnings) == len(packs)  # one line per creation
    warnings = [m for m in warnings if "'contract'" in m]
    assert len(warnings) == 1 and "v2.3" in warnings[0] and "2.4" in warnings[0]
    fields = pack.vector_store.client.describe_collection("contract")["fields"]
    assert not any("sparse" in f["name"] for f in fields)
    assert pack.default_mode == "vector"
    assert "v2.3" in pack.describe()["milvus"]
    top = pack.retriever().retrieve("What do aardvarks eat?")
    assert top[0].node.ref_doc_id == "aardvark"


def test_dense_modes_filters_and_delete(pack: RagPack) -> None:
    assert pack.count() == 4
    top = pack.retriever("vector").retrieve("Who walked on the Moon?")
    assert top[0].node.ref_doc_id == "apollo"
    after = MetadataFilters(filters=[MetadataFilter(key="year", value=1902, operator=">=")])
    kept = pack.retriever("vector", filters=after, similarity_top_k=4).retrieve("the Moon")
    assert kept and {n.node.ref_doc_id for n in kept} <= {"einstein", "milvus"}
    response = pack.run("Where was Einstein born?", answer_style="extractive")
    assert "Ulm" in str(response)
    gone = MetadataFilters(filters=[MetadataFilter(key="title", value="milvus")])
    assert pack.delete(filters=gone) == 1
    assert pack.count() == 3
    ids = {n.node.ref_doc_id for n in pack.retriever("vector").retrieve("vector database")}
    assert "milvus" not in ids


def test_bm25_modes_are_refused_in_one_line_naming_the_version(pack: RagPack) -> None:
    for mode in ("bm25", "hybrid", "hybrid_convex"):
        with pytest.raises(ConfigurationError) as info:
            pack.retriever(mode).retrieve("aardvark")
        message = str(info.value)
        assert "\n" not in message and "v2.3" in message and "2.4" in message


def test_reopen_and_the_sentence_index(pack: RagPack, standalone: Standalone) -> None:
    reopened = RagPack.open(uri=standalone.uri, collection_name="contract", llm=ScriptedLLM())
    assert reopened.count() == pack.count()
    assert reopened.default_mode == "vector"
    client = reopened.vector_store.client
    assert client.has_collection("contract__sentences")
    top = reopened.retriever().retrieve("Which mammal eats termites?")
    assert top[0].node.ref_doc_id == "aardvark"


def test_tenants_stay_apart_and_delete_by_tenant(
    created: tuple[dict[str, RagPack], list[str]],
) -> None:
    pack = created[0]["tenants"]
    fields = pack.vector_store.client.describe_collection("tenants")["fields"]
    assert [f["name"] for f in fields if f.get("is_partition_key")] == ["tenant"]
    for tenant in ("acme", "globex"):
        nodes = pack.retriever(tenant=tenant, similarity_top_k=6).retrieve("launch code")
        assert nodes and {n.node.metadata["tenant"] for n in nodes} == {tenant}
    assert pack.delete(tenant="acme") == 3
    everyone = pack.retriever(tenant="*", similarity_top_k=6).retrieve("launch code")
    assert {n.node.metadata["tenant"] for n in everyone} == {"globex"}


def test_a_collection_the_server_cannot_serve_is_refused_before_it_loads(
    standalone: Standalone, embed_model: Any
) -> None:
    from pymilvus import DataType, MilvusClient

    raw = MilvusClient(uri=standalone.uri)
    schema = raw.create_schema(auto_id=False, enable_dynamic_field=True)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=384)
    schema.add_field("sparse_embedding", DataType.SPARSE_FLOAT_VECTOR)
    raw.create_collection("half_made", schema=schema)  # what 2.3 accepts, and cannot load
    with pytest.raises(ConfigurationError) as info:
        RagPack.open(uri=standalone.uri, collection_name="half_made", embed_model=embed_model)
    assert "\n" not in str(info.value) and "sparse" in str(info.value)
    assert standalone.alive()
    assert raw.get_server_version().startswith("v2.3")
    raw.drop_collection("half_made")


@pytest.mark.parametrize("vectors", ["function", "client"])
def test_bm25_vectors_the_server_lacks_are_refused_and_nothing_is_left(
    standalone: Standalone, vectors: str
) -> None:
    name = f"refused_{vectors}"
    with pytest.raises(ConfigurationError) as info:
        open_vector_store(standalone.uri, name, dim=8, bm25_vectors=vectors)
    assert "\n" not in str(info.value) and "v2.3" in str(info.value)
    client = open_client(standalone.uri)
    assert not client.has_collection(name)
    assert not client.has_collection(f"{name}__bm25_stats")


def test_a_creation_that_fails_on_the_server_leaves_nothing(
    standalone: Standalone, embed_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    def refused(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise MilvusException(code=1100, message="injected: index refused")

    monkeypatch.setattr(MilvusClient, "create_index", refused)
    with pytest.raises(MilvusOperationError, match="index refused") as info:
        RagPack(documents(), uri=standalone.uri, collection_name="failed", embed_model=embed_model)
    assert "\n" not in str(info.value)
    monkeypatch.undo()
    client = open_client(standalone.uri)
    assert not [n for n in client.list_collections() if n.startswith("failed")]

    def insert_refused(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise MilvusException(code=1100, message="injected: insert refused")

    monkeypatch.setattr(MilvusClient, "insert", insert_refused)
    with pytest.raises(MilvusOperationError, match="insert refused"):
        RagPack(documents(), uri=standalone.uri, collection_name="failed", embed_model=embed_model)
    monkeypatch.undo()
    assert not [n for n in client.list_collections() if n.startswith("failed")]


# last: a restarted server is slow to create collections for a while
def test_a_server_restart_mid_session(pack: RagPack, standalone: Standalone) -> None:
    retriever = pack.retriever("vector")
    assert retriever.retrieve("aardvark")
    count = pack.count()
    standalone.stop()
    try:
        with pytest.raises(MilvusUnavailableError) as info:
            retriever.retrieve("aardvark")
        assert "\n" not in str(info.value)
    finally:
        standalone.start()
    assert retriever.retrieve("What do aardvarks eat?")[0].node.ref_doc_id == "aardvark"
    assert pack.count() == count
