from __future__ import annotations

from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    """Datasets: chunked uploads, safe extraction, format detection, thumbnails."""

    name = "edtweb.datasets"
