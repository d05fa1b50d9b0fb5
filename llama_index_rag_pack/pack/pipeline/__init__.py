"""An insert's slices written one after another, with the BM25 analysis of the next slice done
in a helper process while the current one is embedded and stored."""
