"""The results file: rows with their provenance, the cell identity, and safe concurrent writes."""
