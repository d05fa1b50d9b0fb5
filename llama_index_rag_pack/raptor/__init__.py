"""RAPTOR: clustering (UMAP, Gaussian mixtures), the tree's levels and summaries, incremental
updates, the tree stored in Milvus and its retriever."""
