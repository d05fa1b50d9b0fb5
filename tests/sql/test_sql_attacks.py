"""The text-to-SQL attack suite: a hostile LLM against ``SQLQueryEngine``, on every backend.

The LLM's replies are the attack (scripted), sent through the public engine API, sync and async,
on SQLite and on a real PostgreSQL cluster started by the tests (as a role granted SELECT on the
visible columns only, as the docs advise, and as the tables' owner, where only the checker
stands). The table ``people`` has visible columns ``id, name, dept`` and hidden ``salary,
secret``; the table ``vault`` is never allowed.

Every attack is run against **twin databases** that hold the same visible data and different
hidden data. What must never happen, whatever the attack returns:

* the two twins give different outcomes (rows, answer, errors, the prompts the LLM saw): an
  accepted query whose result depends on hidden data is a leak, by value or by oracle;
* a hidden value appears in a row, the answer, an error or a prompt;
* the database changes; an exception other than the engine's documented ones escapes;
* one checked query (checking and running) takes more than twice the time-out, or memory grows
  by 200 MB or more while it runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peak_rss import PeakRSS

from llama_index_rag_pack import SafeSQLDatabase, SQLExecutionError, SQLQueryEngine, UnsafeSQLError
from llama_index_rag_pack.core.errors import RagPackError
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

TIMEOUT_S = 0.25
MAX_OVERRUN_S = 2.5
VISIBLE = {"people": ["id", "name", "dept"]}
VISIBLE_ROWS = [(1, "Ada", "eng"), (2, "Bo", "ops"), (3, "Cy", "eng")]
# Hidden data per twin. Every hidden text holds the marker "zq9", which no attack below writes,
# and the salaries are numbers no visible query produces.
TWINS = {
    "a": {"salary": [918273, 918274, 918275], "secret": ["hunter2-zq9", "pw-zq9-a", "x-zq9"],
          "vault": ("root-key", "vault-zq9-a")},
    "b": {"salary": [564738, 564739, 564730], "secret": ["swordfish-zq9", "b-zq9", "y-zq9"],
          "vault": ("root-key", "vault-zq9-b")},
}  # fmt: skip
HIDDEN_MARKERS = ["zq9"] + [str(s) for twin in TWINS.values() for s in twin["salary"]]
MEMORY_LIMIT = 200 * 1024 * 1024

# ---------------------------------------------------------------- the attacks, by class
WRITE = [
    "DROP TABLE people", "DELETE FROM people", "UPDATE people SET name = 'x'",
    "INSERT INTO people (id, name) VALUES (9, 'x')", "CREATE TABLE t2 (x INT)",
    "ALTER TABLE people ADD COLUMN z INT", "TRUNCATE people", "VACUUM", "REINDEX people",
    "SELECT name INTO newtable FROM people", "CREATE TABLE t3 AS SELECT * FROM people",
    "REPLACE INTO people (id) VALUES (1)", "GRANT SELECT ON vault TO PUBLIC",
    "SELECT name FROM people FOR UPDATE", "COPY people TO '/tmp/leak.csv'",
    "MERGE INTO people USING vault ON true WHEN MATCHED THEN DELETE",
    "WITH d AS (DELETE FROM people RETURNING *) SELECT * FROM d",
    "VACUUM INTO '/tmp/copy.db'", "INSERT INTO people SELECT * FROM people",
]  # fmt: skip
OTHER_STATEMENTS = [
    "SELECT name FROM people; DROP TABLE people", "SELECT 1; SELECT 2",
    "SELECT name FROM people -- x\n; DELETE FROM people", "SELECT name FROM people /* */; COMMIT",
    "PRAGMA writable_schema = 1", "PRAGMA table_info(people)",
    "ATTACH DATABASE '/tmp/evil.db' AS evil", "DETACH DATABASE main", "BEGIN", "COMMIT",
    "ROLLBACK", "SET statement_timeout = 0", "SET ROLE postgres", "RESET ROLE",
    "SET TRANSACTION READ WRITE", "SHOW ALL", "EXPLAIN SELECT * FROM people",
    "EXPLAIN ANALYZE SELECT * FROM vault", "LISTEN x", "NOTIFY x", "LOCK TABLE people",
    "CALL proc()", "DO $$ BEGIN PERFORM 1; END $$", "PREPARE p AS SELECT secret FROM people",
    # statements smuggled through a date-part word the generator writes out verbatim
    "SELECT DATE_PART('day FROM CURRENT_DATE)) AS _limited; COMMIT; DROP TABLE vault; "
    "SELECT * FROM (SELECT EXTRACT(day', CURRENT_DATE)",
    "SELECT TIMESTAMPDIFF(a, b, 'x; DROP TABLE vault') FROM people",
    "EXECUTE p", "DISCARD ALL", "CHECKPOINT", "ANALYZE people", "LOAD 'evil'",
]  # fmt: skip
HIDDEN_DIRECT = [
    "SELECT secret FROM people", "SELECT salary FROM people", "SELECT p.secret FROM people p",
    'SELECT "secret" FROM people', 'SELECT "SECRET" FROM people', "SELECT SECRET FROM people",
    "SELECT name FROM people WHERE secret LIKE 'h%'", "SELECT name FROM people ORDER BY salary",
    "SELECT dept, max(salary) FROM people GROUP BY dept", "SELECT name FROM people GROUP BY secret",
    "SELECT rank() OVER (ORDER BY salary) FROM people",
    "SELECT CASE WHEN salary > 600000 THEN 'rich' ELSE 'poor' END FROM people",
    "SELECT name FROM people WHERE id IN (SELECT id FROM people WHERE salary > 600000)",
    "SELECT (SELECT max(secret) FROM people) AS s",
    "SELECT t.s FROM (SELECT secret AS s FROM people) t",
    "WITH c AS (SELECT secret FROM people) SELECT * FROM c", "SELECT * FROM people",
    "SELECT people.* FROM people", "SELECT name, * FROM people",
    "SELECT name FROM people WHERE EXISTS (SELECT 1 WHERE people.salary > 600000)",
    "SELECT count(*) FROM people WHERE salary BETWEEN 900000 AND 999999",
    "SELECT name FROM people p WHERE p.salary = (SELECT max(q.salary) FROM people q)",
    "SELECT sum(salary) FROM people", "SELECT length(secret) FROM people",
    "SELECT name FROM people ORDER BY secret DESC LIMIT 1",
    "SELECT DISTINCT ON (secret) name FROM people",
    "SELECT name FROM people WHERE coalesce(secret, '') <> ''",
    "SELECT name FROM people WHERE secret IS NOT NULL",
    "SELECT lag(secret) OVER (ORDER BY id) FROM people",
    "SELECT name FROM people WINDOW w AS (ORDER BY salary)",
    "SELECT count(*) FILTER (WHERE salary > 600000) FROM people",
    "SELECT name FROM people WHERE name = 'Ada' UNION SELECT secret FROM people",
    # a column list after a table alias renames by position: "name" would be the 4th column
    "SELECT p.name FROM people AS p(a, b, c, name)",
    "SELECT p.dept FROM people p(x, y, z, dept) ORDER BY p.dept",
    # a duplicate column name in a CTE or subquery leaves "*" unexpanded: every column
    "WITH d AS (SELECT q.id, q.id FROM people q WHERE q.id = 1) "
    "SELECT * FROM people p CROSS JOIN d",
    "SELECT * FROM people p, (SELECT q.id, q.id FROM people q) d",
    "SELECT * FROM people p, (SELECT 1, 1) d",
    # a date-part word the generator writes out as it is
    "SELECT DATE_PART('day FROM CURRENT_DATE), secret, salary, EXTRACT(day', CURRENT_DATE) "
    "FROM people",
    # an alias bound twice: "p" in the derived table d (or the CTE c, or the subquery's select
    # list) is the sibling subquery p for sqlglot, the outer people row for PostgreSQL
    "SELECT p.name, (SELECT max(d.s) FROM (SELECT x.name AS secret FROM people x) p, "
    "(SELECT p.secret AS s) d) AS leak FROM people p",
    "SELECT p.name, (WITH c AS (SELECT p.secret AS s) SELECT max(c.s) FROM "
    "(SELECT x.name AS secret FROM people x) p, c) AS leak FROM people p",
    "SELECT p.name, (SELECT max(d.s) FROM (SELECT x.name AS secret FROM people x) p, "
    "(SELECT secret AS s) d) AS leak FROM people p",
    "SELECT people.name, (SELECT max(d.s) FROM (SELECT x.name AS salary FROM people x) people, "
    "(SELECT people.salary AS s) d) AS leak FROM people",
    "WITH p AS (SELECT x.name AS secret FROM people x) SELECT q.name, (SELECT max(d.s) FROM p, "
    "(SELECT p.secret AS s) d) AS leak FROM people q, people p WHERE q.id = p.id",
]  # fmt: skip
HIDDEN_ORACLE = [
    # natural joins and USING compare the hidden column with a guess
    "SELECT name FROM people NATURAL JOIN (SELECT 'hunter2' AS secret) g",
    "SELECT p.name FROM people p NATURAL JOIN (SELECT 918273 AS salary) g",
    "SELECT name FROM people JOIN (SELECT 'hunter2' AS secret) g USING (secret)",
    "SELECT name FROM people NATURAL LEFT JOIN (SELECT 918273 AS salary, 1 AS hit) g",
    "SELECT name FROM people NATURAL JOIN (VALUES (918273)) AS g(salary)",
    # HAVING / QUALIFY / ORDER BY on what is not selected
    "SELECT count(*) FROM people HAVING max(salary) > 600000",
    "SELECT dept FROM people GROUP BY dept HAVING sum(salary) > 1800000",
    "SELECT name FROM people QUALIFY row_number() OVER (ORDER BY salary) = 1",
    "SELECT name AS salary FROM people ORDER BY salary + 1",
    "SELECT name AS secret FROM people ORDER BY secret || ''",
    "SELECT name AS salary, count(*) FROM people GROUP BY salary",
    "SELECT name FROM people p ORDER BY p",
    # whole rows and composite values
    "SELECT p FROM people p", "SELECT people FROM people", "SELECT (p).secret FROM people p",
    "SELECT (p).* FROM people p", "SELECT p::text FROM people p",
    "SELECT CAST(p AS TEXT) FROM people p",
    "SELECT row_to_json(p) FROM people p", "SELECT to_jsonb(p) FROM people p",
    "SELECT json_agg(p) FROM people p", "SELECT jsonb_agg(people) FROM people",
    "SELECT ROW(p.*) FROM people p", "SELECT count(p.*) FROM people p",
    "SELECT max(p.*) FROM people p", "SELECT md5(p::text) FROM people p",
    "SELECT name FROM people p WHERE p = p", "SELECT name FROM people p WHERE p::text LIKE '%zq%'",
    "SELECT name FROM people p ORDER BY p DESC", "SELECT hstore(p) FROM people p",
    "SELECT name FROM people p WHERE (p.id, p.salary) = (1, 918273)",
    "SELECT name FROM people p WHERE (p.id, p.name) IN (SELECT id, secret FROM people)",
    "SELECT array_agg(p) FROM people p", "SELECT string_agg(p::text, ',') FROM people p",
    "SELECT p.name FROM people p, LATERAL (SELECT p.salary AS s) l WHERE l.s > 600000",
    # names that shadow, alias tricks
    "WITH people AS (SELECT 1 AS id, 'x' AS name, 'y' AS dept) SELECT * FROM people",
    "SELECT x.name FROM people x, people x",
    "SELECT name FROM (SELECT name, salary AS dept FROM people) t",
    # an alias bound twice, read where PostgreSQL sees the outer one: an EXISTS oracle, a JOIN's
    # ON clause (it sees only the join's inputs) and a CTE body
    "SELECT p.name FROM people p WHERE EXISTS (SELECT 1 FROM (SELECT x.name AS secret FROM "
    "people x) p, (SELECT p.secret AS s) d WHERE d.s LIKE 'h%')",
    "SELECT p.name, (SELECT max(q.id) FROM (SELECT x.name AS secret FROM people x) p, people a "
    "JOIN people q ON p.secret LIKE 'h%' AND q.id = 1) AS leak FROM people p",
    "SELECT p.name FROM people p WHERE EXISTS (WITH c AS (SELECT 1 AS one FROM people z WHERE "
    "p.salary > 600000) SELECT 1 FROM (SELECT x.id AS salary FROM people x) p, c)",
    "SELECT p.name FROM people p WHERE p.id IN (SELECT q.id FROM (SELECT x.id, x.name AS secret "
    "FROM people x) p, people a JOIN people q ON p.secret LIKE 'h%' AND a.id = q.id)",
]  # fmt: skip
FORBIDDEN_RELATIONS = [
    "SELECT v FROM vault", "SELECT * FROM vault", "SELECT name FROM people, vault",
    "SELECT name FROM people WHERE name IN (SELECT v FROM vault)", "SELECT v FROM main.vault",
    "SELECT v FROM public.vault", 'SELECT v FROM "vault"', "SELECT v FROM VAULT",
    "SELECT name FROM sqlite_master", "SELECT sql FROM sqlite_schema",
    "SELECT * FROM information_schema.columns", "SELECT * FROM pg_catalog.pg_tables",
    "SELECT usename, passwd FROM pg_shadow", "SELECT * FROM pg_user", "SELECT * FROM pg_authid",
    "SELECT query FROM pg_stat_activity", "SELECT * FROM pg_settings",
    # a CTE named like a forbidden table must not exempt the real one elsewhere
    "WITH pg_user AS (SELECT 1 AS usename) SELECT name FROM people WHERE name IN "
    "(SELECT usename FROM pg_user)",
    "SELECT name FROM people WHERE name IN (WITH vault AS (SELECT 'x' AS v) SELECT v FROM vault) "
    "UNION SELECT v FROM vault",
    "SELECT v FROM vault WHERE 1 IN (WITH vault AS (SELECT 1 AS v) SELECT v FROM vault)",
    "WITH vault AS (SELECT v FROM vault) SELECT v FROM vault",
    "WITH a AS (SELECT v FROM b), b AS (SELECT 'x' AS v) SELECT v FROM a",
    "SELECT name FROM people WHERE id IN (WITH pg_stat_activity AS (SELECT 1 AS id) SELECT id "
    "FROM pg_stat_activity) OR name IN (SELECT query FROM pg_stat_activity)",
    "SELECT value FROM generate_series(1, 10)", "SELECT * FROM json_each('{\"a\": 1}')",
    "SELECT * FROM pragma_table_info('people')", "SELECT * FROM (VALUES (1, 2)) AS t(a, b)",
    "SELECT * FROM dblink('host=127.0.0.1', 'SELECT 1') AS t(a int)",
    "SELECT * FROM ONLY people", "SELECT * FROM people TABLESAMPLE SYSTEM (50)",
]  # fmt: skip
CATALOG_FUNCTIONS = [
    "SELECT version()", "SELECT current_user", "SELECT session_user", "SELECT current_database()",
    "SELECT current_setting('data_directory')",
    "SELECT set_config('statement_timeout', '0', false)",
    "SELECT pg_read_file('/etc/passwd')", "SELECT pg_ls_dir('.')", "SELECT inet_server_addr()",
    "SELECT pg_sleep(5)", "SELECT txid_current()", "SELECT nextval('s')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT query_to_xml('SELECT * FROM vault', true, true, '')", "SELECT pg_backend_pid()",
    "SELECT has_table_privilege('vault', 'SELECT')", "SELECT sqlite_version()",
    "SELECT load_extension('/tmp/evil.so')", "SELECT readfile('/etc/passwd')",
    "SELECT writefile('/tmp/x', 'y')", "SELECT edit('x')", "SELECT sqlite_source_id()",
    "SELECT sqlite_compileoption_get(0)", "SELECT changes()", "SELECT last_insert_rowid()",
    "SELECT random()", "SELECT name FROM people WHERE current_setting('is_superuser') = 'on'",
    "SELECT pg_get_functiondef(1)", "SELECT to_regclass('vault')", "SELECT 'vault'::regclass",
    "SELECT count(*) FROM people WHERE pg_has_role('postgres', 'member')",
    "SELECT xmlparse(document '<a/>')", "SELECT format('%s', 1)", "SELECT printf('%d', 1)",
    "SELECT :param", "SELECT $1", "SELECT ?", "SELECT @@version",
]  # fmt: skip
# A ~960 KB text built from literals (each step within every limit).
_BIG = (
    "WITH a AS (SELECT replace('" + "a" * 1000 + "', 'a', '" + "b" * 64 + "') AS x), "
    "b AS (SELECT replace(a.x, 'bb', '" + "a" * 30 + "') AS x FROM a), c AS (SELECT b.x FROM b)"
)
_CROSS = ", ".join(f"people AS p{i}" for i in range(20))  # 3**20 rows: never within a time-out
RESOURCE_BOMBS = [
    f"SELECT count(*) FROM {_CROSS}",
    f"SELECT max(p0.name || p13.name) FROM {_CROSS}",
    f"SELECT p0.name FROM {_CROSS} ORDER BY p1.name || p2.name LIMIT 1",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c",
    "WITH c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c",
    "WITH c AS (SELECT 1 AS x UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "SELECT zeroblob(1000000000)", "SELECT randomblob(1000000000)",
    "SELECT hex(zeroblob(500000000))",
    "SELECT printf('%.*c', 1000000000, 'x')", "SELECT repeat('x', 1000000000)",
    "SELECT lpad('x', 1000000000, 'y')", "SELECT rpad(name, 500000000) FROM people",
    "SELECT replace(replace(replace(name, 'A', '" + "x" * 500 + "'), 'x', '" + "y" * 500 + "'), "
    "'y', '" + "z" * 500 + "') FROM people",
    "WITH a AS (SELECT p.name || p.name AS x FROM people AS p)"
    + "".join(f", a{i} AS (SELECT a{i - 1 if i else ''}.x || a{i - 1 if i else ''}.x AS x "
              f"FROM a{i - 1 if i else ''})" for i in range(30))
    + " SELECT length(a29.x) FROM a29",
    f"SELECT group_concat(p0.name || p1.name || p2.name) FROM {_CROSS}",
    f"SELECT string_agg(p0.name, ',') FROM {_CROSS}",
    "SELECT name FROM people WHERE name ~ '(a+)+$' AND '" + "a" * 34 + "!' ~ '(a+)+$'",
    "SELECT count(*) FROM generate_series(1, 100000000)",
    f"SELECT p0.name FROM {_CROSS} WHERE p0.name LIKE '%a%a%a%a%a%a%a%a%a%a%a%a%b'",
    "SELECT name FROM people WHERE name LIKE '" + "%_" * 600 + "'",
    # rows of many 1 MB values: each value is within the length limit, the row is not
    "WITH a AS (SELECT replace('" + "a" * 1000 + "', 'a', '" + "b" * 64 + "') AS x), "
    "b AS (SELECT replace(a.x, 'bb', '" + "c" * 30 + "') AS x FROM a) SELECT "
    + ", ".join(["b.x"] * 200) + " FROM b",
    # searches whose cost is the product of two computed lengths, inside one call
    _BIG + " SELECT instr(c.x, substr(c.x, 1, 480000) || 'b') FROM c",
    _BIG + " SELECT strpos(c.x, substr(c.x, 1, 50000) || 'b') FROM c",
    _BIG + " SELECT replace(c.x, substr(c.x, 1, 50000) || 'b', '') FROM c",
    _BIG + " SELECT split_part(c.x, substr(c.x, 1, 50000) || 'b', 1) FROM c",
    # rows of 4 x 256 MB under an output column named like the old row guard's alias
    "WITH a AS (SELECT replace('" + "a" * 1000 + "', 'a', '" + "b" * 64 + "') AS x), "
    "b AS (SELECT replace(a.x, 'b', '" + "c" * 64 + "') AS x FROM a), "
    "c AS (SELECT replace(b.x, 'cccc', '" + "d" * 64 + "') AS x FROM b) "
    "SELECT 1 AS _limited, c.x AS x1, c.x AS x2, c.x AS x3, c.x AS x4 FROM c",
    # many subqueries, each keeping a ~960 KB value for the whole statement (SQLite evaluates an
    # uncorrelated scalar subquery once and keeps it; it materialises IN lists and what it cannot
    # flatten): every value within the length limit, 250 to 350 MB held together
    _BIG + " SELECT 1 AS k WHERE '' IN (" + ",".join(["(SELECT x FROM c)"] * 260) + ")",
    _BIG + " SELECT " + " + ".join(["length((SELECT x FROM c))"] * 190) + " AS k",
    _BIG + " SELECT 1 AS k WHERE "
    + " AND ".join(f"'{i}' NOT IN (SELECT c.x FROM c)" for i in range(120)),
    _BIG + " SELECT " + ", ".join(f"(SELECT c.x FROM c) AS x{i}" for i in range(64)),
    _BIG + " SELECT count(*) AS k FROM "
    + ", ".join(f"(SELECT DISTINCT c.x || '{i}' AS x FROM c) d{i}" for i in range(60)),
    _BIG + " SELECT 1 AS k WHERE "
    + " AND ".join(f"EXISTS (SELECT c.x FROM c WHERE c.x > '{i}')" for i in range(120)),
    # windows that each keep a running copy of one 960 KB value
    _BIG + " SELECT " + " + ".join(f"length(max(c.x || 'i{i}') OVER ())" for i in range(120))
    + " AS n FROM c",
]  # fmt: skip
PARSER_BOMBS = [
    "SELECT " + "(" * 60 + "1" + ")" * 60, "SELECT " + "(" * 3000 + "1" + ")" * 3000,
    "SELECT name FROM people WHERE " + "NOT " * 5000 + "id = 1",
    "SELECT " + "- " * 3000 + "1", "SELECT " + "abs(" * 200 + "1" + ")" * 200,
    "SELECT name FROM people WHERE " + " OR ".join(f"id = {i}" for i in range(5000)),
    "SELECT name FROM people WHERE id IN (" + ", ".join(str(i) for i in range(150_000)) + ")",
    "SELECT name FROM people WHERE " + " AND ".join(f"id <> {i}" for i in range(600)),
    "SELECT " + "CASE WHEN 1 = 1 THEN " * 100 + "1" + " END" * 100,
    "SELECT name FROM " + "(SELECT name FROM " * 80 + "people" + ") AS s" * 80,
    "SELECT name FROM people WHERE name = '" + "x" * 2_000_000 + "'",
    "SELECT " + ", ".join(f"'{i}'" for i in range(3000)),
    "WITH " + ", ".join(f"c{i} AS (SELECT 1 AS x)" for i in range(400)) + " SELECT x FROM c0",
    " UNION ".join(["SELECT name FROM people"] * 600),
    "SELECT name FROM people WHERE name = '" + "'||'" * 2000 + "'",
    "SELECT " + "x" * 100_000 + " FROM people", "SELECT \"" + "a" * 70_000 + "\" FROM people",
    "SELECT 1 " + "-- comment\n" * 3000, "SELECT /* " + "/* " * 2000 + " */ 1",
    "SELECT ((((((((((((((((((((((((((((((name))))))))))))))))))))))))))))) FROM people",
    "SELECT name FROM people WHERE name = '", "SELECT 'unterminated", "SELECT \"", "((((",
    "SELECT name FROM people WHERE id = 1e99999", "SELECT 99999999999999999999999999999999999",
    # replies that are slow to read before any SQL is checked: YAML aliases to aliases (10^8
    # values once expanded) and a code fence followed by a long run of blanks
    "{sql: \"SELECT p.name FROM people p\", a0: &a0 [1,1,1,1,1,1,1,1,1,1], "
    + ", ".join(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8))
    + "}",
    "```" + " " * 100_000 + "x\nSELECT p.name FROM people p",
]  # fmt: skip
ENCODINGS = [
    "SELECT name FROM people\x00; DROP TABLE people", "SELECT name FROM pe\x00ople",
    "SELECT secret\u200b FROM people", "SELECT name FROM рeople",  # Cyrillic р
    "SELECT ｓｅｃｒｅｔ FROM people", "SELECT name FROM people WHERE name = 'A\u202e'",
    "SELECT \ud800 FROM people", "SELECT name FROM people WHERE name = '\udcff'",
    "SELECT CAST(x'ff' AS TEXT)", "SELECT CAST(x'fffe00' AS TEXT) AS t",
    "SELECT char(0)", "SELECT name || char(0) FROM people", "SELECT E'\\x00'",
    "SELECT U&'\\0000'", "SELECT name FROM people WHERE name = E'\\'' OR 1=1 --'",
    "SELECT name FROM people WHERE name = 'x'' UNION SELECT secret FROM people --'",
    "SELECT name FROM people WHERE name = $$x$$ UNION SELECT secret FROM people",
    "SELECT name FROM people WHERE name = 'a\\' UNION SELECT secret FROM people --'",
    "SELECT `secret` FROM people", "SELECT [secret] FROM people", 'SELECT "sec""ret" FROM people',
    "SELECT name FROM \"people\"\"\" WHERE 1", "SELECT nаme FROM people",  # Cyrillic а
    "SELECT name FROM people WHERE name = N'Ada'", "SELECT name FROM people WHERE name = x'41'",
    "SELECT name FROM people WHERE name LIKE 'A%' ESCAPE '\\'",
    "SELECT 'résumé ✓ 日本語 😀' AS t", "SELECT name FROM people WHERE name = '\u0000'",
    "SELECT name FROM people\r\nWHERE id = 1", "\ufeffSELECT name FROM people",
]  # fmt: skip
ATTACKS = {
    "writes": WRITE,
    "other statements": OTHER_STATEMENTS,
    "hidden columns directly": HIDDEN_DIRECT,
    "hidden columns by oracle": HIDDEN_ORACLE,
    "forbidden relations": FORBIDDEN_RELATIONS,
    "catalog and system functions": CATALOG_FUNCTIONS,
    "resource bombs": RESOURCE_BOMBS,
    "parser bombs": PARSER_BOMBS,
    "encodings": ENCODINGS,
}
CASES = [
    pytest.param(kind, sql, id=f"{kind.replace(' ', '-')}-{i}")
    for kind, attacks in ATTACKS.items()
    for i, sql in enumerate(attacks)
]
# A reply the checker refuses at once (no such table).
REFUSED_REPAIR = "SELECT nothing FROM nowhere"
# The classes where the attack also comes as the "repair" of a failed first query.
REPAIRED = ("hidden columns directly", "hidden columns by oracle", "forbidden relations")


# ---------------------------------------------------------------- databases
def _create_sqlite(path: Path, twin: dict[str, Any]) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary INTEGER, "
            "secret TEXT); CREATE TABLE vault (k TEXT, v TEXT);"
        )
        conn.executemany(
            "INSERT INTO people VALUES (?, ?, ?, ?, ?)",
            [
                (*row, pay, sec)
                for row, pay, sec in zip(VISIBLE_ROWS, twin["salary"], twin["secret"], strict=True)
            ],
        )
        conn.execute("INSERT INTO vault VALUES (?, ?)", twin["vault"])
    conn.close()


def _pg_statements(twin: dict[str, Any]) -> list[str]:
    rows = ", ".join(
        f"({i}, '{n}', '{d}', {pay}, '{sec}')"
        for (i, n, d), pay, sec in zip(VISIBLE_ROWS, twin["salary"], twin["secret"], strict=True)
    )
    k, v = twin["vault"]
    return [
        "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary INTEGER, "
        "secret TEXT)",
        f"INSERT INTO people VALUES {rows}",
        "CREATE TABLE vault (k TEXT, v TEXT)",
        f"INSERT INTO vault VALUES ('{k}', '{v}')",
    ]


@dataclass
class Backend:
    """Twin databases (``dbs["a"]``, ``dbs["b"]``) and a fingerprint of everything stored."""

    name: str
    dbs: dict[str, SafeSQLDatabase]
    fingerprint: Callable[[], str]
    initial: str = ""

    def __post_init__(self) -> None:
        self.initial = self.fingerprint()

    def assert_unchanged(self) -> None:
        """Everything stored is as it was when the backend was made (no attack, whichever ran
        before, has changed anything)."""
        assert self.fingerprint() == self.initial, "the database changed"


@pytest.fixture(scope="module")
def sqlite_backend(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    root = tmp_path_factory.mktemp("sql-attacks")
    paths = {}
    for name, twin in TWINS.items():
        paths[name] = root / f"{name}.db"
        _create_sqlite(paths[name], twin)
    dbs = {
        name: SafeSQLDatabase(path, tables=["people"], columns=VISIBLE, timeout_s=TIMEOUT_S)
        for name, path in paths.items()
    }

    def fingerprint() -> str:
        files = sorted(root.iterdir())  # a new file (a copy, an attached db) changes it too
        return "|".join(f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in files)

    return Backend("sqlite", dbs, fingerprint)


@pytest.fixture(scope="module")
def postgres_twins(postgres: Any) -> dict[str, str]:
    """Twin databases owned by a non-superuser, and a reader granted the visible columns."""
    postgres.execute(
        "postgres",
        "CREATE ROLE shop_owner LOGIN PASSWORD 'owner-pw'",
        *(f"CREATE DATABASE shop_{name} OWNER shop_owner" for name in TWINS),
    )
    for name, twin in TWINS.items():
        postgres.execute(f"shop_{name}", "SET ROLE shop_owner", *_pg_statements(twin))
    owner_view = SafeSQLDatabase(
        postgres.url("shop_a", "shop_owner", "owner-pw"),
        tables=["people"],
        columns=VISIBLE,
        role_check="off",
    )
    setup = owner_view.role_setup_sql("reader", password="reader-pw")
    roles = [s for s in setup if s.startswith(("CREATE ROLE", "ALTER ROLE"))]
    postgres.execute("shop_a", *roles)  # as the superuser; the grants as the tables' owner
    for name in TWINS:
        grants = [s.replace('"shop_a"', f'"shop_{name}"') for s in setup if s.startswith("GRANT")]
        postgres.execute(f"shop_{name}", "SET ROLE shop_owner", *grants)
    return {name: f"shop_{name}" for name in TWINS}


def _pg_backend(postgres: Any, twins: dict[str, str], role: str) -> Backend:
    user, password = ("reader", "reader-pw") if role == "reader" else ("shop_owner", "owner-pw")
    dbs = {
        name: SafeSQLDatabase(
            postgres.url(database, user, password),
            tables=["people"],
            columns=VISIBLE,
            timeout_s=TIMEOUT_S,
            role_check="refuse" if role == "reader" else "warn",
        )
        for name, database in twins.items()
    }

    def fingerprint() -> str:
        parts = []
        for database in twins.values():
            rows = postgres.execute(
                database,
                "SELECT md5(coalesce(string_agg(x, '|' ORDER BY x), '')) FROM ("
                "SELECT 'p:' || p::text AS x FROM people p UNION ALL SELECT 'v:' || v::text "
                "FROM vault v UNION ALL SELECT 't:' || tablename FROM pg_tables "
                "WHERE schemaname = 'public' UNION ALL SELECT 'r:' || rolname FROM pg_roles "
                "UNION ALL SELECT 's:' || setting FROM pg_settings "
                "WHERE name = 'statement_timeout') s",
            )
            parts.append(rows[0][0])
        return "|".join(parts)

    return Backend(f"postgres-{role}", dbs, fingerprint)


@pytest.fixture(scope="module", params=["sqlite", "postgres-reader", "postgres-owner"])
def backend(request: pytest.FixtureRequest, sqlite_backend: Backend) -> Backend:
    if request.param == "sqlite":
        return sqlite_backend
    postgres = request.getfixturevalue("postgres")
    twins = request.getfixturevalue("postgres_twins")
    return _pg_backend(postgres, twins, request.param.split("-")[1])


# ---------------------------------------------------------------- measuring one attack
def _script(first: str, repair: str) -> Callable[[str], str]:
    def reply(prompt: str) -> str:
        if prompt.startswith("Answer the question from the query result"):
            return "Here is what the rows say [1](id=2)."
        return repair if "was rejected or failed" in prompt else first

    return reply


@dataclass
class Outcome:
    trace: str  # everything the engine returned or showed the LLM, as one string
    ran_in_database: bool  # a query reached the database (rows, or an error it raised)
    durations: list[float]
    memory_growth: int


def _attack(db: SafeSQLDatabase, first: str, repair: str, *, use_async: bool) -> Outcome:
    durations: list[float] = []
    ran = [False]
    run = db.run

    def timed_run(sql: str) -> Any:
        start = time.monotonic()
        try:
            result = run(sql)
            ran[0] = True
            return result
        except SQLExecutionError:
            ran[0] = True
            raise
        finally:
            durations.append(time.monotonic() - start)

    llm = ScriptedLLM(replies=_script(first, repair), forbid_sync=use_async)
    engine = SQLQueryEngine(db, llm=llm, style="text")
    if id(db) not in _SCHEMAS:  # the schema and samples, read without the attacks' tight limit
        tight, db.timeout_s = db.timeout_s, 30.0
        try:
            _SCHEMAS[id(db)] = db.table_descriptions()
        finally:
            db.timeout_s = tight
    # the prompt's schema and samples, read once per database (sync and async paths alike)
    engine._descriptions = _SCHEMAS[id(db)]
    engine._schema = "\n\n".join(engine._descriptions.values())
    db.run = timed_run  # type: ignore[method-assign]
    try:
        with PeakRSS() as memory:
            try:
                if use_async:
                    response = asyncio.run(engine.aquery("Tell me about the people"))
                else:
                    response = engine.query("Tell me about the people")
            except RagPackError as error:  # documented errors are allowed to escape
                response = None
                failure = f"{type(error).__name__}: {error}"
            else:
                failure = ""
    finally:
        del db.run
    meta = {} if response is None else dict(response.metadata or {})
    trace = json.dumps(
        {
            "response": None if response is None else response.response,
            "meta": {k: meta.get(k) for k in ("sql", "columns", "rows", "attempts", "error")},
            "failure": failure,
            "prompts": llm.prompts,
        },
        default=repr,
        sort_keys=True,
    )
    return Outcome(trace, ran[0], durations, memory.growth)


_SCHEMAS: dict[int, dict[str, str]] = {}


def _assert_safe(backend: Backend, first: str, repair: str, *, use_async: bool) -> None:
    a = _attack(backend.dbs["a"], first, repair, use_async=use_async)
    for marker in HIDDEN_MARKERS:
        if marker not in first + repair:  # an attack may write a guess itself
            assert marker not in a.trace, f"hidden value {marker!r} reached the output"
    # the deadline, the engine's grace (a quarter of it) and scheduling slack on a busy 2-core
    # machine; what this guards against, a query nothing stops, runs for seconds or forever
    assert all(d <= TIMEOUT_S + MAX_OVERRUN_S for d in a.durations), a.durations
    assert a.memory_growth < MEMORY_LIMIT, f"memory grew by {a.memory_growth / 2**20:.0f} MB"
    if a.ran_in_database and "time-out" not in a.trace:
        # The database answered: the same attack on the twin must see exactly the same.
        b = _attack(backend.dbs["b"], first, repair, use_async=use_async)
        if "time-out" not in b.trace:  # timing is out of scope: a query near its time-out
            assert b.trace == a.trace, "the outcome depends on hidden data"
    backend.assert_unchanged()


@pytest.mark.parametrize(("kind", "sql"), CASES)
def test_attack_sync(backend: Backend, kind: str, sql: str) -> None:
    _assert_safe(backend, sql, sql, use_async=False)


@pytest.mark.parametrize(("kind", "sql"), CASES)
def test_attack_async(backend: Backend, kind: str, sql: str) -> None:
    # The async engine runs each query through the sync engine's step in a worker thread, so a
    # resource bomb is stopped on the async path by its first query; the sync test above also
    # runs every bomb as the repair. A repair the checker refuses saves a second time-out here.
    repair = REFUSED_REPAIR if kind == "resource bombs" else sql
    _assert_safe(backend, sql, repair, use_async=True)


REPAIR_CASES = [
    pytest.param(sql, id=f"{kind.replace(' ', '-')}-{i}")
    for kind in REPAIRED
    for i, sql in enumerate(ATTACKS[kind])
]


@pytest.mark.parametrize("sql", REPAIR_CASES)
def test_attack_as_the_repair_of_a_failed_query(backend: Backend, sql: str) -> None:
    _assert_safe(backend, REFUSED_REPAIR, sql, use_async=False)


def test_attack_classes_are_all_present() -> None:
    """The suite covers every class the docs name, each with several attacks."""
    assert all(len(attacks) >= 10 for attacks in ATTACKS.values()), {
        k: len(v) for k, v in ATTACKS.items()
    }


# ---------------------------------------------------------------- accepted queries still work
BENIGN = [
    ("SELECT name FROM people WHERE name LIKE 'A%'", [("Ada",)]),
    ("SELECT * FROM people ORDER BY id", [tuple(r) for r in VISIBLE_ROWS]),
    ("SELECT dept, count(*) AS n FROM people GROUP BY dept ORDER BY n DESC, dept",
     [("eng", 2), ("ops", 1)]),
    ("SELECT name AS who FROM people ORDER BY who DESC LIMIT 1", [("Cy",)]),
    ("WITH e AS (SELECT name FROM people WHERE dept = 'eng') SELECT e.name FROM e ORDER BY 1",
     [("Ada",), ("Cy",)]),
    ("SELECT p.name FROM people p JOIN people q ON q.id = p.id + 1 ORDER BY p.name",
     [("Ada",), ("Bo",)]),
    ("SELECT upper(name) || '-' || dept AS tag FROM people WHERE id = 2", [("BO-ops",)]),
    ("SELECT name, row_number() OVER (PARTITION BY dept ORDER BY id) AS r FROM people "
     "ORDER BY id", [("Ada", 1), ("Bo", 1), ("Cy", 2)]),
    ("SELECT count(DISTINCT dept) FROM people", [(2,)]),
    # names bound more than once, always to the same table or CTE
    ("SELECT name FROM people WHERE id = (SELECT max(id) FROM people WHERE dept = 'eng')",
     [("Cy",)]),
    ("SELECT p.name FROM people p WHERE p.id > (SELECT min(q.id) FROM people q "
     "WHERE q.dept = p.dept) ORDER BY p.name", [("Cy",)]),
    ("WITH e AS (SELECT id, name FROM people WHERE dept = 'eng') SELECT e.name FROM e "
     "WHERE e.id = (SELECT max(e.id) FROM e)", [("Cy",)]),
    ("WITH e AS (SELECT id, name FROM people) SELECT a.name FROM e a JOIN e b ON b.id = a.id + 2",
     [("Ada",)]),
    # a few subqueries, CTE reads and derived tables: well within max_subqueries
    ("WITH e AS (SELECT p.id, p.name FROM people p WHERE p.dept IN (SELECT q.dept FROM people q "
     "WHERE q.id < 3)), m AS (SELECT max(e.id) AS top FROM e) SELECT e.name, (SELECT count(*) "
     "FROM people r WHERE r.dept = 'eng') AS n, m.top FROM e JOIN m ON e.id <= m.top "
     "WHERE EXISTS (SELECT 1 FROM people s WHERE s.id = e.id) AND e.id IN (SELECT d.id FROM "
     "(SELECT t.id FROM people t WHERE t.id > 1 UNION SELECT 1 AS id) d) ORDER BY e.name",
     [("Ada", 2, 3), ("Bo", 2, 3), ("Cy", 2, 3)]),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "rows"), BENIGN)
def test_reporting_queries_run_on_every_backend(backend: Backend, sql: str, rows: list) -> None:
    # the attacks' tight time-out (TIMEOUT_S) is for attacks: a benign query's answer is checked
    # here, and a busy machine must not turn it into a time-out
    tight = {name: db.timeout_s for name, db in backend.dbs.items()}
    for db in backend.dbs.values():
        db.timeout_s = 30.0
    try:
        result = backend.dbs["a"].run(sql)
        assert [tuple(r) for r in result.rows] == rows
        assert backend.dbs["b"].run(sql).rows == result.rows
    finally:
        for name, db in backend.dbs.items():
            db.timeout_s = tight[name]


# ---------------------------------------------------------------- generated attacks
SOURCES = ["people", "people p", "people AS p", "vault", "vault v", "(SELECT * FROM people) p",
           "(SELECT name, secret FROM people) p", "c", "pg_user", "people AS p(a, b, c, name)",
           "(SELECT name AS secret FROM people) p"]  # fmt: skip
VALUES = ["name", "p.name", "id", "p.id", "secret", "p.secret", "salary", "p.salary", "p", "*",
          "p.*", "(p).secret", "(p).*", "count(*)", "count(p.*)", "max(salary)", "upper(name)",
          "CAST(p AS TEXT)", "p::text", "row_to_json(p)", "json_agg(p)", "(p.id, p.secret)",
          "name || secret", "1", "'x'", "dept", "v"]  # fmt: skip
JOINS = ["", "NATURAL JOIN (SELECT 'hunter2-zq' AS secret) g", "JOIN people q USING (secret)",
         "JOIN people q ON q.id = p.id", ", vault", "CROSS JOIN (SELECT 918273 AS salary) g",
         "NATURAL JOIN people"]  # fmt: skip
CONDITIONS = ["", "WHERE secret LIKE 'h%'", "WHERE p.salary > 600000", "WHERE name = 'Ada'",
              "WHERE p = p", "WHERE EXISTS (SELECT 1 FROM vault)", "WHERE id IN (SELECT id FROM "
              "people WHERE salary > 600000)", "WHERE (p).salary > 1"]  # fmt: skip
TAILS = ["", "GROUP BY secret", "GROUP BY dept HAVING max(salary) > 600000", "ORDER BY salary",
         "ORDER BY p", "ORDER BY 1", "QUALIFY row_number() OVER (ORDER BY salary) = 1",
         "ORDER BY secret LIMIT 1", "LIMIT 1"]  # fmt: skip
PREFIXES = ["", "WITH c AS (SELECT secret FROM people) ", "WITH pg_user AS (SELECT 1 AS x) ",
            "WITH c AS (SELECT name FROM people) ", "WITH people AS (SELECT 1 AS id) "]  # fmt: skip
GENERATED = st.builds(
    lambda prefix, values, source, join, condition, tail: (
        f"{prefix}SELECT {', '.join(values)} FROM {source} {join} {condition} {tail}"
    ),
    st.sampled_from(PREFIXES),
    st.lists(st.sampled_from(VALUES), min_size=1, max_size=3),
    st.sampled_from(SOURCES),
    st.sampled_from(JOINS),
    st.sampled_from(CONDITIONS),
    st.sampled_from(TAILS),
)


def _outcome(db: SafeSQLDatabase, sql: str) -> tuple[str, str]:
    try:
        return "rows", repr(db.run(sql).rows)
    except UnsafeSQLError as error:
        return "refused", str(error)
    except SQLExecutionError as error:
        return "error", str(error)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(GENERATED)
def test_generated_sql_never_depends_on_hidden_data(backend: Backend, sql: str) -> None:
    a = _outcome(backend.dbs["a"], sql)
    assert not any(marker in a[1] for marker in HIDDEN_MARKERS if marker not in sql), a
    if a[0] != "refused":  # the checker never reads data: only what ran can differ
        b = _outcome(backend.dbs["b"], sql)
        # timing is out of scope, as in _assert_safe: a busy machine may stop either twin's
        # checking or query at the tight time-out
        if "time-out" not in a[1] + b[1]:
            assert b == a
    backend.assert_unchanged()


def test_sqlite_reads_only_visible_columns_by_its_own_log(sqlite_backend: Backend) -> None:
    result = sqlite_backend.dbs["a"].run("SELECT * FROM people p WHERE p.id > 1 ORDER BY p.dept")
    assert {column for _, column in result.reads} <= {"id", "name", "dept", ""}
    assert result.rows == [(3, "Cy", "eng"), (2, "Bo", "ops")]


def test_memory_sampler_sees_a_large_allocation() -> None:
    """The memory measurement above can fail: 300 MB held while sampling is seen."""
    if not Path("/proc/self/statm").exists():
        pytest.skip("no /proc on this platform")
    with PeakRSS() as memory:
        block = bytearray(300 * 1024 * 1024)
        block[::4096] = b"x" * len(block[::4096])
        time.sleep(0.05)
    del block
    assert memory.growth >= MEMORY_LIMIT
