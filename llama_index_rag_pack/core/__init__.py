"""Pure algorithms: no LlamaIndex classes and no pymilvus; Python, numpy, scikit-learn, UMAP.

Clustering, rank fusion, reference rewriting, quote checks, metrics, similarity, LLM-output
parsing and the package's errors. Everything here is deterministic and property-tested.
"""
