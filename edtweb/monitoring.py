"""What an admin's monitoring reads from the web: ``/metrics`` (Prometheus), ``/healthz``
(the process answers) and ``/readyz`` (Redis and the database answer). None needs a login;
``/metrics`` asks for a bearer token where the admin set ``EDT_METRICS_TOKEN``.

``/metrics`` is read at scrape time from where each fact lives (docs/architecture.md,
"Sources of truth"), never from gauges kept up to date along the way:

- ``edt_slots{state}``: the slot registry (alive, lost, offline);
- ``edt_jobs{state}``: the jobs in the database;
- ``edt_job_workers{job}``: each job's members in the allocation record;
- ``edt_job_idle{job}``, ``edt_job_idle_held{job}``: 1 where the scheduler flagged the job
  idle, and where a rule holds it at its minimum for it, else 0 (the allocation record;
  docs/architecture.md, "Idle jobs");
- ``edt_job_samples_per_second{job}``: a running job's latest train metric stored;
- ``edt_metrics_lag_records{job}``: records in a job's stream after the metrics
  consumer's cursor (counted up to ``LAG_CAP``);
- the active scheduler's own metrics, as it last wrote them to Redis
  (``scheduler/metrics.py``: steps, decisions and their latency, learner starts and exits,
  its Redis retries).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector

from edtweb.redis_access import redis_client, store
from edtweb.training.metrics_consumer import watched_jobs
from edtweb.training.models import Job
from edtweb.training.models import Metric as MetricRow
from protocol.keys import job_key
from scheduler.store import AllocationRecord
from workers.metrics import slot_counts

log = logging.getLogger("edt.web")

LAG_CAP = 5_000  # records counted per job and scrape at most


class EdtCollector:
    """The gauges of the module's docstring and the scheduler's metrics, read when
    Prometheus scrapes. A part whose store is away is left out of that scrape (said in the
    log); ``/readyz`` says which."""

    def describe(self) -> list[Metric]:
        return []  # nothing read at registration: see WEB below

    def collect(self) -> Iterator[Metric]:
        for part in (self.redis_parts, self.database_parts):
            try:
                yield from part()
            except (redis.RedisError, DatabaseError) as exc:
                log.warning("metrics: %s left out (%s)", part.__name__, exc)

    def redis_parts(self) -> Iterator[Metric]:
        slots = GaugeMetricFamily("edt_slots", "Slots by state", labels=["state"])
        for state, count in slot_counts(store().list_slots()).items():
            slots.add_metric([state], count)
        workers = GaugeMetricFamily(
            "edt_job_workers", "Learners in each job's generation (allocation record)",
            labels=["job"],
        )  # fmt: skip
        record = store().allocations()
        for job, allocation in sorted(record.jobs.items()):
            workers.add_metric([str(job)], len(allocation.members))
        yield from (slots, workers, *idle_families(record), self.lag())
        yield from scheduler_families(store().scheduler_metrics())

    def database_parts(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("edt_jobs", "Jobs by state", labels=["state"])
        counts = dict(Job.objects.order_by().values_list("state").annotate(n=Count("pk")))
        for state in Job.State.values:
            jobs.add_metric([state], counts.get(state, 0))
        rate = GaugeMetricFamily(
            "edt_job_samples_per_second", "A running job's samples/s at its latest iteration "
            "stored", labels=["job"],
        )  # fmt: skip
        for pk in Job.objects.filter(state=Job.State.RUNNING).values_list("pk", flat=True):
            latest = latest_rate(pk)
            if latest is not None:
                rate.add_metric([str(pk)], latest)
        yield from (jobs, rate)

    def lag(self) -> Metric:
        """Records in each watched job's stream after the metrics consumer's cursor."""
        gauge = GaugeMetricFamily(
            "edt_metrics_lag_records", "Metric records in Redis not yet stored in the "
            f"database (counted up to {LAG_CAP})", labels=["job"],
        )  # fmt: skip
        jobs = sorted(watched_jobs())
        client = redis_client()
        cursors = client.mget([job_key(str(pk), "cursor") for pk in jobs]) if jobs else []
        pipe = client.pipeline(transaction=False)
        for pk, cursor in zip(jobs, cursors, strict=True):
            after = "(" + str(cursor or "0-0")  # exclusive: the cursor's record is stored
            pipe.xrange(job_key(str(pk), "metrics"), after, "+", count=LAG_CAP)
        for pk, entries in zip(jobs, pipe.execute(), strict=True):
            gauge.add_metric([str(pk)], len(entries))
        return gauge


def idle_families(record: AllocationRecord) -> tuple[Metric, Metric]:
    """Per job holding slots: whether the scheduler flagged it idle, and whether a rule
    holds it at its minimum for that."""
    idle = GaugeMetricFamily("edt_job_idle", "1: the scheduler flagged the job idle (its "
                             "slots under EDT_IDLE_UTILISATION for EDT_IDLE_SECONDS)",
                             labels=["job"])  # fmt: skip
    held = GaugeMetricFamily("edt_job_idle_held", "1: an idle job its team's or group's "
                             "rule holds at its minimum", labels=["job"])  # fmt: skip
    for job in sorted(record.jobs.keys() | record.idle.keys()):
        flagged = record.idle.get(job)
        idle.add_metric([str(job)], 1 if flagged else 0)
        held.add_metric([str(job)], 1 if flagged and flagged[1] else 0)
    return idle, held


def scheduler_families(text: str) -> Iterator[Metric]:
    """The families of the scheduler's text, less the ``_created`` timestamps (written
    back under their counter's name, they would not parse as the same family)."""
    for family in text_string_to_metric_families(text):
        family.samples = [s for s in family.samples if not s.name.endswith("_created")]
        yield family


def latest_rate(job_id: int) -> float | None:
    """samples/s of the job's latest train record stored, if it has one."""
    values = (
        MetricRow.objects.filter(job_id=job_id, kind="train")
        .order_by("-step")
        .values_list("values", flat=True)
        .first()
    )
    rate = values.get("samples_per_s") if values else None
    return float(rate) if isinstance(rate, (int, float)) else None


# Registering describes nothing (``describe``): reading the stores at import, as an
# auto-described collector's registration would, happens inside the web's event loop,
# where the database may not be used (every page answered 500 while the URLs loaded).
WEB = CollectorRegistry()
WEB.register(EdtCollector())
ProcessCollector(registry=WEB)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.EDT_METRICS_TOKEN
    if token and not _bearer_is(request, token):
        response = HttpResponse(
            "/metrics asks for the token in EDT_METRICS_TOKEN: send the header "
            "'Authorization: Bearer <token>' (Prometheus: authorization.credentials_file)\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="edt-metrics"'
        return response
    return HttpResponse(generate_latest(WEB), content_type=CONTENT_TYPE_LATEST)


def _bearer_is(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    same = hmac.compare_digest(given.strip().encode(), token.encode())
    return scheme.lower() == "bearer" and same


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: 200 when Redis and the database both answer; 503 otherwise, the body
    saying which does not."""
    checks = {"redis": redis_down(), "database": database_down()}
    body: dict[str, Any] = {name: error or "ok" for name, error in checks.items()}
    ready = not any(checks.values())
    body["status"] = "ready" if ready else "not ready"
    return JsonResponse(body, status=200 if ready else 503)


def redis_down() -> str:
    """Why Redis does not answer ('' when it does)."""
    try:
        redis_client().ping()
    except (redis.RedisError, OSError) as exc:
        return f"down: {exc}"
    return ""


def database_down() -> str:
    """Why the database does not answer ('' when it does)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return f"down: {exc}"
    return ""
