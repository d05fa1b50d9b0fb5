"""Documents: reading files, chunking, the sentences of a chunk, and the text analysis of BM25 in
each text's own language (scripts, language identification, segmenters, stop words)."""
