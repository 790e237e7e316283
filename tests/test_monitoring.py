"""What an admin's monitoring reads: ``/metrics`` with real values while a job trains on a
live EDT (the CLI's, tests/test_cli.py), ``/readyz`` following Redis down and up again,
``/healthz``, a worker host's own metrics, and Redis retries counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import Client, override_settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.retry import REDIS_RETRIES, Backoff
from protocol.slots import SlotRegistry
from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import LiveEdt, dataset_archive
from tests.harness.waiting import wait_for
from workers.metrics import HostCollector
from workers.supervisor import Child

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """(sample name, sorted labels) -> value, of a Prometheus text exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(url: str) -> Samples:
    answer = requests.get(f"{url}/metrics", timeout=30)
    assert answer.status_code == 200, answer.text
    return samples(answer.text)


def trained(seen: Samples, job: int) -> bool:
    """The job trains with workers, its rate is stored, and the scheduler has decided."""
    label = (("job", str(job)),)
    return (
        seen.get(("edt_job_workers", label), 0) > 0
        and seen.get(("edt_job_samples_per_second", label), 0) > 0
        and seen.get(("edt_scheduler_decision_seconds_count", ()), 0) > 0
    )


def test_metrics_show_a_training_job_with_real_values(live: LiveEdt) -> None:
    live.login("mallory")
    archive = dataset_archive(live.tmp / "monitoring", train=256, test=32)
    upload = live.edt("mallory", "datasets", "upload", str(archive), "--name", "watched")
    assert upload.returncode == 0, upload.stderr
    mlp = str(PROJECT_DIR / "examples" / "mlp.py")
    live.json("mallory", "models", "upload", mlp, "--name", "watched-mlp")
    shape = ("--max-workers", "2", "--batch-size", "32", "--epochs", "500")
    job = live.json("mallory", "submit", "--model", "watched-mlp", "--dataset", "watched", *shape)
    job = job["id"]
    try:
        last: dict[str, Samples] = {}

        def training() -> bool:
            last["seen"] = scrape(live.url)
            return trained(last["seen"], job)

        wait_for(training, 180, lambda: f"job {job}'s metrics; last seen: {last.get('seen')}")
        seen = last["seen"]
        assert seen[("edt_slots", (("state", "alive"),))] == 2  # the stack's --cpu-slots 2
        assert seen[("edt_jobs", (("state", "RUNNING"),))] >= 1
        workers = seen[("edt_job_workers", (("job", str(job)),))]
        assert seen[("edt_learner_starts_total", ())] >= workers
        assert seen[("edt_scheduler_step_seconds_count", ())] >= 1
        assert ("edt_metrics_lag_records", (("job", str(job)),)) in seen
        # Served, as the scheduler wrote it (its value moves only while Redis is away).
        assert ("edt_redis_retries_total", ()) in seen
    finally:
        assert live.edt("mallory", "stop", str(job)).returncode == 0


@pytest.fixture
def redis_for_settings(private_redis: RedisServer) -> Any:
    """The web's settings pointed at a Redis of this test's own (to stop and start it)."""
    with override_settings(REDIS_URL=private_redis.url):
        yield private_redis


@pytest.mark.django_db
def test_readyz_answers_503_while_redis_is_down_and_200_after(
    redis_for_settings: RedisServer,
) -> None:
    client = Client()
    assert client.get("/readyz").status_code == 200
    redis_for_settings.stop()
    down = client.get("/readyz")
    assert down.status_code == 503
    body = down.json()
    assert body["redis"].startswith("down: ") and body["database"] == "ok", body
    redis_for_settings.start()
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.json()
    assert ready.json() == {"redis": "ok", "database": "ok", "status": "ready"}


def test_healthz_answers_without_a_login() -> None:
    answer = Client().get("/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


@pytest.mark.django_db
def test_metrics_leave_out_what_redis_cannot_say_while_it_is_down(
    redis_for_settings: RedisServer,
) -> None:
    """The database's part still answers: a scrape never fails for one store away."""
    redis_for_settings.stop()
    answer = Client().get("/metrics")
    assert answer.status_code == 200
    seen = samples(answer.content.decode())
    assert seen[("edt_jobs", (("state", "RUNNING"),))] == 0
    assert not any(name == "edt_slots" for name, _ in seen)


def test_a_worker_hosts_metrics_count_its_own_slots(private_redis: RedisServer) -> None:
    registry = SlotRegistry(connect(private_redis.url))
    places = (("here", 0), ("here", 1), ("here", 2), ("elsewhere", 0))
    ids = [registry.register_slot(host, index, "cpu", 1) for host, index in places]
    for slot in (ids[0], ids[3]):
        registry.heartbeat(slot, {}, ttl=60)
    registry.mark_offline(ids[2])
    child = Child("cpu0: worker", lambda: None)  # type: ignore[arg-type,return-value]
    child.restarts = 3
    host = CollectorRegistry()
    host.register(HostCollector("here", lambda: registry, [child]))
    seen = samples(generate_latest(host).decode())
    for state, count in (("alive", 1), ("lost", 1), ("offline", 1)):
        assert seen[("edt_host_slots", (("host", "here"), ("state", state)))] == count
    restarts = ("edt_host_worker_restarts_total", (("host", "here"), ("worker", "cpu0: worker")))
    assert seen[restarts] == 3


def test_each_failed_attempt_counts_as_a_redis_retry() -> None:
    before = REDIS_RETRIES._value.get()
    backoff = Backoff()
    backoff.failed()
    backoff.failed()
    assert REDIS_RETRIES._value.get() == before + 2


def test_the_readme_says_how_to_scrape() -> None:
    readme = (PROJECT_DIR / "README.md").read_text()
    section = readme.split("## Monitoring", 1)[1].split("\n## ", 1)[0]
    for name in ("/metrics", "/healthz", "/readyz", "--metrics-port", "docs/grafana-edt.json"):
        assert name in section, name
    dashboard = Path(PROJECT_DIR / "docs" / "grafana-edt.json").read_text()
    for metric in ("edt_slots", "edt_jobs", "edt_job_workers", "edt_job_samples_per_second",
                   "edt_scheduler_decision_seconds", "edt_learner_starts_total",
                   "edt_learner_exits_total", "edt_redis_retries_total",
                   "edt_metrics_lag_records"):  # fmt: skip
        assert metric in dashboard, metric
