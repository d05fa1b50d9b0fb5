"""The text-to-SQL attack suite as a before/after table: each attack class, each backend.

Runs every attack of ``tests/sql/test_sql_attacks.py`` (a hostile LLM's replies, through the public
``SQLQueryEngine.query``) against twin databases that differ only in hidden data, for two
implementations side by side: this checkout, and an earlier commit (``--before REV``, checked out
into a temporary git worktree and imported from there). Backends: SQLite, and a throw-away
PostgreSQL cluster on 127.0.0.1 (when its binaries exist) as the tables' owner and as a role
granted the visible columns only.

Each attack ends in one outcome, the first that applies:

* ``hung``: no answer within ``--hang-s`` seconds (the worker is killed and restarted);
* ``memory``: the worker grew past 3 GB (killed and restarted), or by 200 MB or more during a
  query that finished;
* ``crashed``: an exception other than the implementation's documented errors escaped ``query``,
  or the worker process died;
* ``leaked``: a hidden value in the answer, rows, errors or prompts, or a different outcome on
  the twin with different hidden data (an oracle) while a second run on the first twin repeats
  the first (so ``random()`` is no leak; the PostgreSQL twins are databases named ``shop_a``
  and ``shop_b``, so ``current_database()`` reaching the answer counts: a catalog value);
* ``changed``: the database changed;
* ``slow``: a query (checking and running) took more than twice the time-out;
* ``held``: none of the above.

    python benchmarks/bench_sql_attacks.py [--before 2009ef0] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _results import REPO_ROOT, add_out_argument, md_table, write_results

OUTCOMES = ("held", "hung", "crashed", "leaked", "changed", "slow", "memory")
TIMEOUT_S = 0.6
MAX_WORKER_RSS = 3 * 2**30  # a worker past this is stopped: the attack counts as "memory"


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _attack_module() -> Any:
    """``tests/sql/test_sql_attacks.py`` (attack lists, twin data, memory sampler), imported."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    spec = importlib.util.spec_from_file_location(
        "sql_attacks", REPO_ROOT / "tests" / "test_sql_attacks.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["sql_attacks"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- worker (one implementation)
def _database(pkg: Any, target: str, tables: list[str], visible: dict, role_check: str) -> Any:
    wanted = {
        "tables": tables,
        "columns": visible,
        "timeout_s": TIMEOUT_S,
        "role_check": role_check,
    }
    accepted = inspect.signature(pkg.SafeSQLDatabase).parameters
    return pkg.SafeSQLDatabase(target, **{k: v for k, v in wanted.items() if k in accepted})


def worker(args: argparse.Namespace) -> int:
    """Run attacks ``args.start``.. on one backend; one JSON line per attack on stdout."""
    import llama_index_rag_pack as pkg
    from llama_index_rag_pack.core.errors import RagPackError
    from llama_index_rag_pack.testing import ScriptedLLM

    attacks = _attack_module()
    targets = json.loads(args.targets)
    role_check = "warn" if args.backend == "postgres-owner" else "refuse"
    dbs = {
        twin: _database(pkg, target, ["people"], attacks.VISIBLE, role_check)
        for twin, target in targets["dbs"].items()
    }
    documented = (pkg.UnsafeSQLError, pkg.SQLExecutionError, RagPackError)
    schema = {twin: db.describe() for twin, db in dbs.items()}
    cases = [(kind, sql) for kind, lst in attacks.ATTACKS.items() for sql in lst]

    def fingerprint() -> str:
        return _fingerprint(targets)

    def attempt(twin: str, sql: str) -> tuple[str, bool, list[float], int, bool]:
        db = dbs[twin]
        durations: list[float] = []
        run = db.run
        ran = [False]

        def timed(text: str) -> Any:
            start = time.monotonic()
            try:
                result = run(text)
                ran[0] = True
                return result
            except pkg.SQLExecutionError:  # the database ran it and refused or stopped it
                ran[0] = True
                raise
            finally:
                durations.append(time.monotonic() - start)

        llm = ScriptedLLM(replies=attacks._script(sql, sql))
        engine = pkg.SQLQueryEngine(db, llm=llm, style="text")
        engine._schema = schema[twin]
        db.run = timed
        crashed = False
        try:
            with attacks.PeakRSS() as memory:
                try:
                    response = engine.query("Tell me about the people")
                    meta = dict(response.metadata or {})
                    text = response.response
                except documented as error:
                    meta, text = {}, f"{type(error).__name__}: {error}"
                except Exception as error:  # an undocumented exception escaped
                    meta, text, crashed = {}, f"{type(error).__name__}: {error}", True
        finally:
            del db.run
        trace = json.dumps(
            {"text": text, "meta": {k: meta.get(k) for k in ("sql", "rows", "attempts", "error")},
             "prompts": llm.prompts},
            default=repr, sort_keys=True,
        )  # fmt: skip
        return trace, ran[0], durations, memory.growth, crashed

    for index in range(args.start, len(cases)):
        kind, sql = cases[index]
        before = fingerprint()
        trace, ran, durations, growth, crashed = attempt("a", sql)
        outcome = "held"
        markers = [m for m in attacks.HIDDEN_MARKERS if m not in sql]
        if crashed:
            outcome = "crashed"
        elif any(m in trace for m in markers) or (ran and _differs(attempt, sql, trace)):
            outcome = "leaked"
        elif fingerprint() != before:
            outcome = "changed"
        elif any(d > 2 * TIMEOUT_S for d in durations):
            outcome = "slow"
        elif growth >= attacks.MEMORY_LIMIT:
            outcome = "memory"
        print(json.dumps({"index": index, "kind": kind, "outcome": outcome,
                          "max_s": round(max(durations, default=0.0), 3),
                          "growth_mb": round(growth / 2**20)}), flush=True)  # fmt: skip
    return 0


def _differs(attempt: Any, sql: str, trace: str) -> bool:
    """Whether the twin's outcome differs from ``trace`` while a second run on the first twin
    repeats it (so a non-repeatable query such as ``random()`` is not counted as a leak)."""
    if "time-out" in trace:
        return False
    twin = attempt("b", sql)[0]
    return "time-out" not in twin and twin != trace and attempt("a", sql)[0] == trace


def _fingerprint(targets: dict[str, Any]) -> str:
    import hashlib

    if targets["kind"] == "sqlite":
        return "|".join(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in targets["files"])
    import psycopg

    parts = []
    for url in targets["admin"]:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT md5(coalesce(string_agg(x, '|' ORDER BY x), '')) FROM ("
                "SELECT 'p:' || p::text AS x FROM people p UNION ALL SELECT 'v:' || v::text "
                "FROM vault v UNION ALL SELECT 't:' || tablename FROM pg_tables "
                "WHERE schemaname = 'public') s"
            ).fetchone()
        parts.append(row[0])
    return "|".join(parts)


# ---------------------------------------------------------------- parent
def _run_implementation(
    label: str, pythonpath: str | None, backend: str, targets: dict[str, Any], total: int,
    hang_s: float,
) -> list[dict[str, Any]]:  # fmt: skip
    """All attacks on one backend; a worker that hangs is killed and restarted after it."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    results: list[dict[str, Any]] = []
    start = 0
    while start < total:
        cmd = [sys.executable, __file__, "--worker", "--backend", backend, "--start", str(start),
               "--targets", json.dumps(targets)]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        deadline = time.monotonic() + 60  # imports and the schema, then hang_s per attack
        while True:
            wait = min(max(deadline - time.monotonic(), 0), 0.5)
            ready, _, _ = select.select([proc.stdout], [], [], wait)
            line = proc.stdout.readline() if ready else ""
            if line:
                row = json.loads(line)
                results.append(row)
                start = row["index"] + 1
                deadline = time.monotonic() + hang_s
                continue
            alive = proc.poll() is None
            huge = alive and _rss(proc.pid) > MAX_WORKER_RSS
            if alive and not huge and time.monotonic() < deadline:
                continue
            proc.kill()
            proc.wait()
            if start < total:  # the attack at ``start`` hung, blew up memory or killed the worker
                outcome = "memory" if huge else "hung" if alive else "crashed"
                results.append({"index": start, "kind": None, "outcome": outcome})
                start += 1
            break
        print(f"  {label} {backend}: {len(results)}/{total}", file=sys.stderr, flush=True)
    return results


def _setup_sqlite(attacks: Any, root: Path) -> dict[str, Any]:
    files = {}
    for twin, data in attacks.TWINS.items():
        files[twin] = root / f"{twin}.db"
        attacks._create_sqlite(files[twin], data)
    return {"kind": "sqlite", "dbs": {t: str(p) for t, p in files.items()},
            "files": [str(p) for p in files.values()]}  # fmt: skip


def _setup_postgres(attacks: Any, conftest: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    bindir, tried = conftest._postgres_bindir()
    if bindir is None:
        print(f"no PostgreSQL binaries ({tried}): SQLite only", file=sys.stderr)
        return None, {}
    cluster = conftest.PostgresCluster(bindir)
    databases = [f"CREATE DATABASE shop_{t} OWNER shop_owner" for t in attacks.TWINS]
    cluster.execute(
        "postgres",
        "CREATE ROLE shop_owner LOGIN PASSWORD 'owner-pw'",
        "CREATE ROLE reader LOGIN PASSWORD 'reader-pw'",
        *databases,
    )
    grant = 'GRANT SELECT ("id", "name", "dept") ON people TO reader'
    for twin, data in attacks.TWINS.items():
        cluster.execute(f"shop_{twin}", "SET ROLE shop_owner", *attacks._pg_statements(data), grant)
    admin = [cluster.url(f"shop_{t}").replace("+psycopg", "") for t in attacks.TWINS]
    targets = {}
    for role, (user, pw) in {"owner": ("shop_owner", "owner-pw"),
                             "reader": ("reader", "reader-pw")}.items():  # fmt: skip
        dbs = {t: cluster.url(f"shop_{t}", user, pw) for t in attacks.TWINS}
        targets[f"postgres-{role}"] = {"kind": "postgres", "dbs": dbs, "admin": admin}
    return cluster, targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="2009ef0", help="earlier commit to compare with")
    parser.add_argument("--hang-s", type=float, default=10.0, help="an attack's hang limit, s")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--targets", help=argparse.SUPPRESS)
    add_out_argument(parser)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    attacks = _attack_module()
    import conftest

    total = sum(len(v) for v in attacks.ATTACKS.values())
    tmp = Path(tempfile.mkdtemp(prefix="sql-attacks-"))
    old = tmp / "before"
    subprocess.run(["git", "worktree", "add", "--detach", str(old), args.before],
                   cwd=REPO_ROOT, check=True, capture_output=True)  # fmt: skip
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {"before": {}, "after": {}}
    backends: dict[str, Any] = {}
    try:
        # Fresh databases for each implementation: an attack that got through (a dropped table)
        # must not change what the other implementation is measured on.
        for label, path in (("before", str(old)), ("after", None)):
            cluster = None
            try:
                root = tmp / f"databases-{label}"  # tmp / "before" is the old checkout
                root.mkdir()
                backends = {"sqlite": _setup_sqlite(attacks, root)}
                cluster, pg = _setup_postgres(attacks, conftest)
                backends.update(pg)
                for backend, targets in backends.items():
                    runs[label][backend] = _run_implementation(
                        label, path, backend, targets, total, args.hang_s
                    )
            finally:
                if cluster is not None:
                    cluster.stop()
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO_ROOT,
                       capture_output=True)  # fmt: skip

    kinds = list(attacks.ATTACKS)
    index_kind = [k for k, lst in attacks.ATTACKS.items() for _ in lst]
    summary: dict[str, Any] = {}
    rows = []
    for backend in backends:
        for kind in kinds:
            cells = []
            for label in ("before", "after"):
                counts = Counter(
                    r["outcome"] for r in runs[label][backend] if index_kind[r["index"]] == kind
                )
                summary.setdefault(label, {}).setdefault(backend, {})[kind] = dict(counts)
                bad = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES[1:] if counts[o])
                cells.append(f"{counts['held']} held" + (f"; {bad}" if bad else ""))
            rows.append([backend, kind, len(attacks.ATTACKS[kind]), *cells])
    table = md_table(
        ["backend", "attack class", "attacks", f"before ({args.before})", "after"], rows, "llr"
    )
    totals = []
    for backend in backends:
        line = [backend]
        for label in ("before", "after"):
            counts = Counter(r["outcome"] for r in runs[label][backend])
            line.append(", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o]))
        totals.append(line)
    write_results(
        "sql_attacks",
        {"summary": summary, "runs": runs, "timeout_s": TIMEOUT_S, "before": args.before},
        [
            ("Outcomes per attack class", table),
            ("Totals per backend", md_table(["backend", "before", "after"], totals)),
        ],
        out=args.out,
        description=(
            f"Each of the {total} attacks of tests/sql/test_sql_attacks.py sent as the LLM's reply "
            f"through SQLQueryEngine.query (sync), time-out {TIMEOUT_S} s, on twin databases "
            "that differ only in hidden data. Outcomes: held; hung (no answer within "
            f"{args.hang_s:g} s); crashed (an undocumented exception escaped); leaked (a hidden "
            "value in the output or prompts, or a different, repeatable outcome on the twin; "
            "current_database() counts: the PostgreSQL twins are shop_a and shop_b); changed (the "
            "database); slow (> 2x the time-out); memory (>= 200 MB growth)."
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
