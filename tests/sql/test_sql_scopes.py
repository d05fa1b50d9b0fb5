"""``check_sql``'s name resolution across scopes (``sql/sql_scopes.py``): a name bound to two
different sources anywhere in a statement is refused, because databases differ in which one a
qualifier reaches (PostgreSQL hides a derived table's siblings, a CTE body's and an ``ON``
clause's, and then reads the enclosing query's source of that name)."""

from __future__ import annotations

import pytest

from llama_index_rag_pack import UnsafeSQLError, check_sql

VISIBLE = {"people": ["id", "name", "dept"], "teams": ["dept", "lead"]}
SIBLING = "(SELECT x.name AS secret FROM people x) p"  # a source "p" with an output "secret"

SHADOWED = [
    # a derived table beside p: sqlglot reads p.secret from the sibling, PostgreSQL from the
    # outer people p (the hidden column)
    f"SELECT p.name, (SELECT max(d.s) FROM {SIBLING}, (SELECT p.secret AS s) d) AS leak "
    "FROM people p",
    # the same reference in a CTE of the subquery
    f"SELECT p.name, (WITH c AS (SELECT p.secret AS s) SELECT max(c.s) FROM {SIBLING}, c) AS leak "
    "FROM people p",
    # an oracle only
    f"SELECT p.name FROM people p WHERE EXISTS (SELECT 1 FROM {SIBLING}, (SELECT p.secret AS s) d "
    "WHERE d.s LIKE 'h%')",
    # a JOIN's ON clause sees only the join's inputs in PostgreSQL
    f"SELECT p.name, (SELECT max(q.id) FROM {SIBLING}, people a JOIN people q ON p.secret LIKE "
    "'h%' AND q.id = 1) AS leak FROM people p",
    # an unqualified name qualified by sqlglot to the sibling
    f"SELECT p.name, (SELECT max(d.s) FROM {SIBLING}, (SELECT secret AS s) d) AS leak "
    "FROM people p",
    # a bare table name bound again to a subquery
    "SELECT people.name FROM people WHERE EXISTS (SELECT 1 FROM (SELECT x.id AS salary FROM "
    "people x) people, (SELECT people.salary AS s) d WHERE d.s > 1)",
    # a CTE and a table under one name, in different scopes
    "WITH p AS (SELECT x.name AS secret FROM people x) SELECT q.name, (SELECT max(d.s) FROM p, "
    "(SELECT p.secret AS s) d) AS leak FROM people q, people p WHERE q.id = p.id",
    # two different tables under one alias, in different scopes
    "SELECT t.name FROM people t WHERE EXISTS (SELECT 1 FROM teams t WHERE t.lead = 'x')",
    # a subquery reusing the alias of a subquery elsewhere
    "SELECT a.n FROM (SELECT x.name AS n FROM people x) a WHERE a.n IN (SELECT a.n FROM "
    "(SELECT y.dept AS n FROM people y) a)",
    # an alias named like a CTE of the statement
    "WITH c AS (SELECT x.name FROM people x) SELECT c.id FROM people c WHERE c.name IN "
    "(SELECT c.name FROM c)",
]


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
@pytest.mark.parametrize("sql", SHADOWED)
def test_a_name_bound_to_two_sources_is_refused(sql: str, dialect: str) -> None:
    with pytest.raises(UnsafeSQLError, match="own alias") as error:
        check_sql(sql, VISIBLE, dialect=dialect)
    assert "\n" not in str(error.value)


def test_the_reported_leak_is_refused_by_name() -> None:
    with pytest.raises(UnsafeSQLError) as error:
        check_sql(SHADOWED[0], VISIBLE, dialect="postgres")
    assert str(error.value) == (
        "the name 'p' is given to two different sources (tables, CTEs or subqueries) in the "
        "query; give each source its own alias"
    )


ACCEPTED = [
    # a correlated subquery naming an outer alias bound once
    "SELECT p.name FROM people p WHERE p.id > (SELECT min(q.id) FROM people q WHERE q.dept = "
    "p.dept)",
    "SELECT p.name FROM people p WHERE EXISTS (SELECT 1 FROM teams t WHERE t.dept = p.dept)",
    # a self-join with two aliases
    "SELECT p.name, q.name FROM people p JOIN people q ON q.id = p.id + 1",
    # the same table, unaliased, in a subquery and outside: the same columns either way
    "SELECT name FROM people WHERE id = (SELECT max(id) FROM people)",
    "SELECT name FROM people WHERE dept IN (SELECT dept FROM teams) AND id IN (SELECT id FROM "
    "people WHERE dept = 'eng')",
    # the same table under the same alias in two scopes
    "SELECT p.name FROM people p WHERE p.id IN (SELECT p.id FROM people p WHERE p.dept = 'eng')",
    # CTEs used once and several times
    "WITH e AS (SELECT name FROM people WHERE dept = 'eng') SELECT e.name FROM e",
    "WITH e AS (SELECT id, name FROM people) SELECT e.name FROM e WHERE e.id = (SELECT max(e.id) "
    "FROM e)",
    "WITH e AS (SELECT id, name FROM people) SELECT a.name, b.name FROM e a JOIN e b ON b.id = "
    "a.id + 1",
    "WITH e AS (SELECT id FROM people), f AS (SELECT e.id FROM e) SELECT f.id FROM f JOIN e ON "
    "e.id = f.id",
    # unnamed derived tables (sqlglot names them)
    "SELECT count(*) FROM (SELECT name FROM people), (SELECT dept FROM teams)",
    # the same alias in two branches of a UNION over the same table
    "SELECT p.name FROM people p WHERE p.id = 1 UNION SELECT p.name FROM people p WHERE p.id = 2",
]


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
@pytest.mark.parametrize("sql", ACCEPTED)
def test_names_bound_once_or_to_the_same_source_are_accepted(sql: str, dialect: str) -> None:
    assert check_sql(sql, VISIBLE, dialect=dialect).tables


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT x.name FROM people x, people x",  # one scope, one table
        "SELECT x.name FROM people x JOIN teams x ON x.dept = x.dept",
        # a CTE named like an allowed table, in any scope
        "WITH people AS (SELECT 1 AS id) SELECT people.id FROM people",
        "SELECT p.name FROM people p WHERE p.id IN (WITH people AS (SELECT 1 AS id) "
        "SELECT people.id FROM people)",
        "WITH c AS (SELECT 1 AS id), c AS (SELECT 2 AS id) SELECT c.id FROM c",
        # USING and NATURAL joins resolve names nobody qualified
        "SELECT p.name FROM people p JOIN (SELECT 'x' AS secret) g USING (secret)",
        "SELECT p.name FROM people p NATURAL JOIN (SELECT 1 AS salary) g",
    ],
)
def test_other_name_clashes_stay_refused(sql: str) -> None:
    with pytest.raises(UnsafeSQLError):
        check_sql(sql, VISIBLE, dialect="postgres")
