"""A job's records read back through the REST API, as a user or a script reads them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from edtweb.training.models import Job

Get = Callable[[str], tuple[int, Any]]


def token_client(user: Any = None) -> APIClient:
    """An API client that sends ``user``'s token, as a script does (none: anonymous)."""
    client = APIClient()
    if user is not None:
        client.credentials(
            HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}"
        )
    return client


def api_client_get(job: Job) -> Get:
    """GET in this process as the job's owner (Django's test client, no web process)."""
    client = APIClient()
    client.force_authenticate(job.owner)

    def get(url: str) -> tuple[int, Any]:
        reply = client.get(url)
        return reply.status_code, reply.json() if reply.status_code == 200 else reply.content

    return get


def http_get(port: int, token: str) -> Get:
    """GET from the web process over HTTP, with an API token, as a script does."""

    def get(url: str) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{port}{url}" if url.startswith("/") else url
        request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError as exc:
            return 0, str(exc)

    return get


def api_steps(job: Job, get: Get | None = None) -> list[int]:
    """The job's training steps as a user reads them through the REST API, every page."""
    get = get or api_client_get(job)
    steps: list[int] = []
    url: str | None = f"/api/v1/jobs/{job.pk}/metrics/records/?kind=train&limit=1000"
    while url:
        status, body = get(url)
        assert status == 200, body
        steps += [int(r["step"]) for r in body["results"]]
        url = body["next"]
    return steps
