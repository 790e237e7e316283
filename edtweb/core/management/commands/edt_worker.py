from __future__ import annotations

import socket
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from edtweb.redis_server import ping_error
from protocol.connection import connect
from protocol.slots import SlotRegistry
from workers import launcher
from workers.telemetry import discover_gpus


class Command(BaseCommand):
    help = (
        "Run this machine's worker host: one Celery worker per GPU (found through NVML), "
        "or --cpu-slots N CPU slots where there is no GPU."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--cpu-slots",
            type=int,
            default=None,
            help=f"run N CPU slots (default: one slot per GPU, or "
            f"{launcher.DEFAULT_CPU_SLOTS} CPU slots when there is no GPU)",
        )
        parser.add_argument(
            "--host-name", default=socket.gethostname(), help="name of this host in the cluster"
        )
        parser.add_argument(
            "--restart-delay",
            type=float,
            default=10.0,
            help="seconds before a dead slot worker is started again (default 10)",
        )
        parser.add_argument(
            "--metrics-port", type=int, default=settings.EDT_WORKER_METRICS_PORT,
            help="serve this host's Prometheus metrics at /metrics on this port "
            "(default EDT_WORKER_METRICS_PORT; 0: off)",
        )  # fmt: skip

    def handle(self, *args: Any, **opts: Any) -> None:
        host = opts["host_name"]
        if not host or any(c in host for c in " /:@"):
            raise CommandError(f"--host-name {host!r}: use letters, digits, '-', '_' or '.'")
        error = ping_error(settings.REDIS_URL)
        if error:
            raise CommandError(f"Redis at {settings.REDIS_URL} does not answer ({error})")
        try:
            registry = SlotRegistry(connect(settings.REDIS_URL))
            code = launcher.main(host, opts["cpu_slots"], opts["restart_delay"], discover_gpus(),
                                 settings.REDIS_URL, opts["metrics_port"], registry)  # fmt: skip
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if code:
            raise SystemExit(code)
