"""Citations: the query engine that answers with numbered citations, the streaming reference
rewriter, attribution of answer sentences to passages, verified quotes and the postprocessor."""
