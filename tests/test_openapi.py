"""The OpenAPI schema: it validates, every endpoint is in it with a description, and the
Swagger UI works offline. A test proves that the check catches an undocumented endpoint."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver, path
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema
from rest_framework.response import Response
from rest_framework.views import APIView

import edtweb.urls
from edtweb.api import errors, wmla

PREFIXES = ("api/v1/", "platform/rest/deeplearning/v1/")
# Catch-alls (a JSON 404; the WMLA trailing-slash fallback) and the schema's own views.
NOT_ENDPOINTS = {"unknown_endpoint", "slash_tolerant", "SpectacularAPIView",
                 "SpectacularSwaggerView"}  # fmt: skip


def routes(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (route, view) of a URLconf, includes followed."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield route, pattern.callback


def openapi_path(route: str) -> str:
    """``api/v1/jobs/<int:pk>/`` as the schema writes it, parameters blanked: /api/v1/jobs/{}/"""
    return "/" + re.sub(r"<[^>]+>|\{[^}]+\}", "{}", route.lstrip("/"))


def undocumented(urlconf: Any) -> list[str]:
    """Each API endpoint (route and method) missing from the schema or without a
    description; an empty list when all are documented."""
    schema = SchemaGenerator(urlconf=urlconf).get_schema(request=None, public=True)
    documented = {
        (openapi_path(p), method.upper()): operation
        for p, operations in schema["paths"].items()
        for method, operation in operations.items()
    }
    problems = []
    for route, view in routes(get_resolver(urlconf).url_patterns):
        cls = getattr(view, "cls", None)
        name = (cls or view).__name__
        if not route.startswith(PREFIXES) or name in NOT_ENDPOINTS:
            continue
        if cls is None:
            problems.append(f"/{route}: {name} is not a REST framework view, so not in the schema")
            continue
        for method in sorted(m.upper() for m in cls.http_method_names if hasattr(cls, m)):
            if method in ("OPTIONS", "HEAD"):
                continue
            operation = documented.get((openapi_path(route), method))
            if operation is None:
                problems.append(f"{method} /{route}: missing from the schema")
            elif not operation.get("description", "").strip():
                problems.append(f"{method} /{route}: no description (give the view a docstring)")
    return problems


def test_the_schema_validates_without_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "schema.yaml"
    GENERATOR_STATS.reset()  # warnings are counted process-wide
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)  # against the OpenAPI 3 JSON schema
    assert "/api/v1/jobs/{id}/priority/" in schema["paths"]
    assert "/platform/rest/deeplearning/v1/execs" in schema["paths"]


def test_every_api_endpoint_is_documented() -> None:
    assert undocumented(edtweb.urls) == []


class Undocumented(APIView):
    def get(self, request: Any) -> Response:
        return Response({})


def plain_view(request: Any) -> Any:
    return errors.unknown_endpoint(request)


@pytest.fixture
def urlconf_with_undocumented_endpoints() -> Iterator[types.ModuleType]:
    module = types.ModuleType("edt_test_undocumented_urls")
    module.urlpatterns = [  # type: ignore[attr-defined]
        path("api/v1/secret/", Undocumented.as_view()),
        path("api/v1/plain/", plain_view),
        path("platform/rest/deeplearning/v1/execs/<int:pk>/extra", Undocumented.as_view()),
        *edtweb.urls.urlpatterns,
    ]
    sys.modules[module.__name__] = module
    with GENERATOR_STATS.silence():  # it warns about the undocumented view, as it should
        yield module
    GENERATOR_STATS.reset()
    del sys.modules[module.__name__]


def test_the_check_fails_when_an_endpoint_is_undocumented(
    urlconf_with_undocumented_endpoints: types.ModuleType,
) -> None:
    assert undocumented(urlconf_with_undocumented_endpoints) == [
        "GET /api/v1/secret/: no description (give the view a docstring)",
        "/api/v1/plain/: plain_view is not a REST framework view, so not in the schema",
        "GET /platform/rest/deeplearning/v1/execs/<int:pk>/extra: no description "
        "(give the view a docstring)",
    ]


def test_the_catch_alls_are_the_only_views_left_out() -> None:
    left_out = {
        (getattr(view, "cls", None) or view).__name__
        for route, view in routes(get_resolver(edtweb.urls).url_patterns)
        if route.startswith(PREFIXES) and not hasattr(view, "cls")
    }
    assert left_out == {"unknown_endpoint", "slash_tolerant"}
    assert wmla.slash_tolerant.__name__ in NOT_ENDPOINTS


def test_swagger_ui_is_served_offline_and_linked_from_the_pages(client: Any, alice: Any) -> None:
    page = client.get("/api/v1/docs/").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css|png))"', page)
    assert assets and all(a.startswith("/static/") for a in assets), assets
    assert "http://" not in page and "https://" not in page.replace("https://swagger", "")
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
    assert client.get("/api/v1/schema/").status_code == 200
    client.force_login(alice)
    assert 'href="/api/v1/docs/"' in client.get("/jobs/").content.decode()
    assert '<a href="/" id="back-to-edt">' in page  # and a way back
    assert page.index("</nav>") < page.index('id="swagger-ui"')  # beside it, not around it
