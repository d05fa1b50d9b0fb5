"""Changes to Milvus Lite's writes and loads (:mod:`.fast_paths`)."""
