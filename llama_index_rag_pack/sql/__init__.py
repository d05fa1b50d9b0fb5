"""Text-to-SQL with enforced safety: the allowlist checker, limits and scopes, the read-only
database backends (SQLite, PostgreSQL) and the query engine that cites its SQL."""
