from __future__ import annotations

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    """Model definitions: uploaded code, checked in a child process."""

    name = "edtweb.registry"
