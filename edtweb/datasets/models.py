from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models


class Dataset(models.Model):
    class Status(models.TextChoices):
        UPLOADING = "UPLOADING"
        PREPARING = "PREPARING"  # extracting, detecting the format, drawing thumbnails
        READY = "READY"
        FAILED = "FAILED"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets"
    )
    name = models.CharField(max_length=200)
    filename = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.UPLOADING)
    size = models.PositiveBigIntegerField(default=0, help_text="the archive's size in bytes")
    received = models.PositiveBigIntegerField(default=0, help_text="bytes uploaded so far")
    format = models.CharField(max_length=20, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    progress = models.FloatField(default=0.0, help_text="preparation, 0..1")
    created_at = models.DateTimeField(auto_now_add=True)
    # Registered in place: its real path under a data root (read where it is, never copied
    # nor deleted); empty for an uploaded dataset, whose files live under ``root``.
    source = models.CharField(max_length=1000, blank=True)
    # Starts of the preparation: a start after the second loss of its process fails it.
    attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def root(self) -> Path:
        return Path(settings.EDT_DATA_DIR) / "datasets" / str(self.pk)

    @property
    def archive_path(self) -> Path:
        return self.root / "upload.part"

    @property
    def in_place(self) -> bool:
        return bool(self.source)

    @property
    def data_dir(self) -> Path:
        return Path(self.source) if self.source else self.root / "data"

    @property
    def thumbs_dir(self) -> Path:
        return self.root / "thumbs"
