"""Judge-driven recursive RAG: the judge's verdicts, the search tree and the query engine."""
