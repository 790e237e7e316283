from __future__ import annotations

import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from edtweb.redis_server import ping_error
from edtweb.training.metrics_consumer import MetricsConsumer
from protocol.connection import connect
from scheduler.store import Store


class Command(BaseCommand):
    help = (
        "Run the metrics consumer: one active instance (Redis lease) moves learners' metric "
        "records from Redis into the database and to the job pages; others stand by."
    )

    def handle(self, *args: Any, **opts: Any) -> None:
        error = ping_error(settings.REDIS_URL)
        if error:
            raise CommandError(f"Redis at {settings.REDIS_URL} does not answer ({error})")
        # Its own client: a blocking read must not hold up anything else in the process.
        consumer = MetricsConsumer(Store(connect(settings.REDIS_URL)))

        def _stop(signum: int, _frame: object) -> None:
            consumer.stopping.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        consumer.run()
