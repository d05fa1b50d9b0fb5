"""The one door to Milvus: the only package that imports pymilvus.

Opening clients and vector stores (Lite or server), schemas, dense, sparse and hybrid search, the
RAPTOR tree's levels, and Milvus errors turned into one-line messages.
"""
