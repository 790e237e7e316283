from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from edtweb.deploycheck import items


class Command(BaseCommand):
    help = (
        "List what a production deployment still lacks (Redis password, learner user, "
        "DEBUG, SECRET_KEY, proxy body limit, HTTPS, allowed hosts, database, metrics "
        "token), each with "
        "OK, WARNING or CHECK (only you can check it) and what to do. Exit status 1 when "
        "an item is missing. Run it with the environment of the web and of edt_worker."
    )

    def handle(self, *args: Any, **opts: Any) -> None:
        found = items()
        width = max(len(item.name) for item in found)
        for item in found:
            self.stdout.write(f"{item.status:<8} {item.name:<{width}}  {item.text}")
        missing = [item.name for item in found if item.missing]
        if missing:
            self.stdout.write(f"\nMissing for production: {', '.join(missing)}.")
            raise SystemExit(1)
        self.stdout.write("\nNothing missing for production that EDT can see.")
