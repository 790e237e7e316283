from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from edtweb.datasets import services
from edtweb.datasets.models import Dataset


class Command(BaseCommand):
    help = "Prepare an uploaded dataset: safe extraction, format detection, thumbnails."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("dataset", type=int, help="the dataset's id")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not Dataset.objects.filter(pk=opts["dataset"]).exists():
            raise CommandError(f"no dataset {opts['dataset']}")
        services.run_preparation(opts["dataset"])
