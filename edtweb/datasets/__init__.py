"""Datasets: upload, safe extraction, format detection, thumbnails."""
