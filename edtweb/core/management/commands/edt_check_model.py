from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from edtweb.registry import services
from edtweb.registry.models import ModelDefinition


class Command(BaseCommand):
    help = "Check an uploaded model definition (in a sandboxed child, with a time limit)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("model", type=int, help="the model definition's id")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not ModelDefinition.objects.filter(pk=opts["model"]).exists():
            raise CommandError(f"no model definition {opts['model']}")
        services.run_check(opts["model"])
