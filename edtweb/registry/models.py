from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models


class ModelDefinition(models.Model):
    class Status(models.TextChoices):
        CHECKING = "CHECKING"
        VALID = "VALID"
        INVALID = "INVALID"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="model_definitions"
    )
    name = models.CharField(max_length=200)
    entry = models.CharField(max_length=300, help_text="the entry module, relative to its folder")
    style = models.CharField(max_length=10, blank=True)  # native or wmla
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CHECKING)
    parameters = models.PositiveBigIntegerField(default=0)
    output_shape = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    error_line = models.TextField(blank=True)
    warnings = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Starts of the check: a start after the second loss of its process fails the model.
    attempts = models.PositiveSmallIntegerField(default=0)
    check_started = models.DateTimeField(null=True, blank=True)  # this start of the check

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def root(self) -> Path:
        return Path(settings.EDT_DATA_DIR) / "models" / str(self.pk)

    @property
    def entry_path(self) -> Path:
        return self.root / "code" / self.entry
