from __future__ import annotations

import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from edtweb.redis_server import ping_error
from edtweb.sweeps.driver import ROUND, SweepDriver
from protocol.connection import connect
from scheduler.store import Store


class Command(BaseCommand):
    help = (
        "Run the sweep driver: one active instance (Redis lease) runs every sweep's Optuna "
        "study: reports its trials' metrics, prunes, asks for new trials as jobs; others "
        "stand by."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--interval", type=float, default=ROUND,
            help=f"seconds between rounds at most (default {ROUND}); metrics wake it sooner",
        )  # fmt: skip

    def handle(self, *args: Any, **opts: Any) -> None:
        error = ping_error(settings.REDIS_URL)
        if error:
            raise CommandError(f"Redis at {settings.REDIS_URL} does not answer ({error})")
        # Its own client: its blocking wait must not hold up anything else in the process.
        driver = SweepDriver(Store(connect(settings.REDIS_URL)), interval=opts["interval"])

        def _stop(signum: int, _frame: object) -> None:
            driver.stopping.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        driver.run()
