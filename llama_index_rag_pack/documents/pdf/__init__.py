"""PDF and image reading: text layer, tables, OCR."""
