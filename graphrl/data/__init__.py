"""Data: readers for the training files' formats (-> slime rows) and synthetic demo data."""
