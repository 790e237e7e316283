from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand

from edtweb.launcher import DEFAULT_PROBE, LaunchError, Options, run
from scheduler.policies import POLICIES


class Command(BaseCommand):
    help = (
        "Run EDT on this machine (what `make run` does): Redis if none is reachable, "
        "migrations, the admin account, then web, scheduler and worker host."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=8000, help="web port (default 8000)")
        parser.add_argument(
            "--cpu-slots", type=int, default=None, help="CPU slots for the worker host"
        )
        parser.add_argument(
            "--live-port", type=int, default=None, help="WebSocket port (default: a free one)"
        )
        parser.add_argument(
            "--policy",
            default=None,
            choices=sorted(POLICIES),
            help="the scheduler's allocation policy (default: the EDT_POLICY setting)",
        )
        parser.add_argument(
            "--redis-probe",
            default=DEFAULT_PROBE,
            help="Redis to use when REDIS_URL is unset, if it answers (default %(default)s)",
        )
        parser.add_argument(
            "--no-demo",
            action="store_true",
            help="no demo dataset and example models on a fresh install (they take seconds "
            "of CPU: generated, then checked in the sandbox)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            options = Options(opts["port"], opts["cpu_slots"], opts["redis_probe"])
            options.live_port = opts["live_port"]
            options.demo = not opts["no_demo"]
            if opts["policy"]:  # the scheduler it starts reads it from its environment
                os.environ["EDT_POLICY"] = opts["policy"]
            code = run(options)
        except LaunchError as exc:
            sys.stderr.write(f"EDT: {exc}\n")
            raise SystemExit(1) from None
        raise SystemExit(code)
