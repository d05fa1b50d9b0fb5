"""The BM25 side of a chunk collection: its analysed field, its rows, its in-memory copy, its
upgrade to another analysis, and the sparse vectors the pack computes where Milvus has no BM25
function."""
