from __future__ import annotations

import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from edtweb.redis_access import store
from edtweb.redis_server import ping_error
from edtweb.training.live import publish_slots
from edtweb.training.live_adapter import live_scheduler
from scheduler.policies import POLICIES
from scheduler.service import SchedulerService


class Command(BaseCommand):
    help = (
        "Run the scheduler: one active instance (Redis lease) decides every job's workers by "
        "policy and applies it between iterations; others stand by."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--interval", type=float, default=1.0, help="seconds between ticks (default 1)"
        )
        parser.add_argument(
            "--policy", default=None, choices=sorted(POLICIES),
            help="allocation policy (default: the EDT_POLICY setting, fairshare unless set)",
        )  # fmt: skip

    def handle(self, *args: Any, **opts: Any) -> None:
        error = ping_error(settings.REDIS_URL)
        if error:
            raise CommandError(f"Redis at {settings.REDIS_URL} does not answer ({error})")
        policy = opts["policy"] or settings.EDT_POLICY
        if policy not in POLICIES:
            raise CommandError(f"EDT_POLICY {policy!r} is not one of {', '.join(sorted(POLICIES))}")
        planner = live_scheduler(policy)
        service = SchedulerService(
            store(), publish_slots, opts["interval"], planner.step,
            allocations=planner.allocations, settle=float(settings.EDT_HEARTBEAT_TTL),
        )  # fmt: skip

        def _stop(signum: int, _frame: object) -> None:
            service.stopping.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        service.run()
