"""The packs: :class:`RagPack`, :class:`RoutedRagPack`, and the registry from retrieval mode
to builder that the packs, evaluation and the CLI all read.
"""
