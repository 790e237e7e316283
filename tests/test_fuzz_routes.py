"""Bad input never takes a route down: every operation of the OpenAPI schema and every page's
query parameter, sent values that overflow (2^70, 1e999), are not finite (nan, inf), are of
the wrong type, oversized, or nested deep but small, as an ordinary user: each answer is
below 500 and comes within a second.

Every parameter is tried with every value of a fixed table, one at a time, on top of a
request that would otherwise be accepted (so the value reaches the code that reads it);
then hypothesis (derandomized: the same examples every run) mixes several bad values into
one body. A slow answer is asked again once before it counts, and the second is scaled by
the machine's load as every bound of the tests is (tests/harness/waiting.py), so that a
busy test machine is not mistaken for slow code.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from edtweb.tenancy.models import ResourceGroup, Team
from edtweb.tenancy.services import set_member
from edtweb.training import services
from edtweb.training.forms import TrainForm
from tests.harness.api import token_client
from tests.harness.processes import PROJECT_DIR
from tests.harness.sweeps import own_storage, sweep_inputs
from tests.harness.waiting import bound

pytestmark = pytest.mark.django_db
SLOW = 1.0  # seconds: any answer slower than this fails
BIG = 2**70
INF = float("inf")


def nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# A query parameter's or a form field's values: text, as a URL carries them.
TEXTS = [str(BIG), str(-BIG), str(2**63), "1e999", "-1e999", "nan", "inf", "-inf", "-1", "0",
         "0.5", "abc", "", "x" * 5000, "9999999d", "99999999999999999999h", "[[[[[]]]]]",
         '{"a": {"a": {}}}', "\x00", "%", "٣", "9999-12-31T23:59:59", "0001-01-01",
         "1767000000000-0", f"{BIG}-0", f"1,{BIG}", "1,,2,abc"]  # fmt: skip
# A JSON field's values (INF is written 1e999; NaN as NaN, which JSON does not allow).
JSONS: list[Any] = [BIG, -BIG, 2**63, -1, 0, 0.5, INF, -INF, float("nan"), "abc", "",
                    "x" * 20_000, True, None, [], {}, [1, "a", None], nested_list(64),
                    nested_dict(64)]  # fmt: skip
# Path parameters: an id past 64 bits, one just past SQLite's, a name too long or strange.
IDS = [str(BIG), str(2**63), str(2**64 - 1), "9" * 40]
NAMES = ["x" * 3000, "%00", "..%2F..", "%F0%9F%92%A5", "1e999", str(BIG), "%C2%B2", "%D9%A3"]


def json_text(value: Any) -> str:
    """``value`` as JSON, infinities written as the overflowing literal 1e999."""
    text = json.dumps(value, allow_nan=True)
    return re.sub(r'(?<!")(-?)Infinity(?!")', r"\g<1>1e999", text)


# The world the requests name ---------------------------------------------------------------


@dataclass
class World:
    """Alice's team, dataset, model, job and sweep: the ids a route's path takes."""

    ids: dict[str, str]
    bodies: dict[str, dict[str, Any]]
    api: APIClient
    pages: Client
    failures: list[str] = field(default_factory=list)


def model_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        tar.add(PROJECT_DIR / "examples" / "mlp.py", arcname="m/main.py")
    return out.getvalue()


@pytest.fixture
def world(alice: Any, store: Any, tmp_path: Path, settings: Any) -> Iterator[World]:
    with own_storage(tmp_path, settings):
        made = sweep_inputs(alice)
        model, dataset = made["model"], made["dataset"]
        ResourceGroup.objects.default()  # an emptied database (a transactional test's) lost it
        team = Team.objects.create(name="blue")
        set_member(team, alice)
        job = services.submit_from_form(alice, {"model": model, "dataset": dataset,
                                                **SUBMIT})  # fmt: skip
        (job.workdir / "logs").mkdir(exist_ok=True)
        (job.workdir / "logs" / "h.0.log").write_text("epoch 0 step 0 loss 2.30\n")
        api = token_client(alice)
        sweep_body = {"model": model.pk, "dataset": dataset.pk, **SWEEP}
        sweep = api.post("/api/v1/sweeps/", sweep_body, format="json").json()["id"]
        pages = Client()
        pages.force_login(alice)
        ids = {"jobs": str(job.pk), "datasets": str(dataset.pk), "models": str(model.pk),
               "sweeps": str(sweep), "execs": str(job.pk), "applications": str(job.pk),
               "hypersearch": str(sweep), "teams": "blue", "groups": "default",
               "members": "alice", "logs": "h.0", "files": "model.pt", "thumbnails": "0.png",
               "instances": "blue"}  # fmt: skip
        bodies = {
            "POST /api/v1/jobs/": {"model": model.pk, "dataset": dataset.pk, **SUBMIT,
                                   "team": "blue"},
            "POST /api/v1/sweeps/": sweep_body,
            "POST /api/v1/auth/token/": {"username": "alice", "password": "alice-pass-1"},
            "POST /api/v1/jobs/{id}/priority/": {"priority": 6000},
            "POST /api/v1/datasets/uploads/": {"name": "d", "filename": "d.tar", "size": 10},
            "POST /api/v1/cluster/shares/preview/": {"teams": {"blue": {"weight": 2}}},
            "POST /platform/rest/deeplearning/v1/hypersearch": HPO,
        }  # fmt: skip
        yield World(ids, bodies, api, pages)


SUBMIT = {"epochs": 2, "batch_size": 32, "max_workers": 2, "min_workers": 1, "priority": 5000,
          "checkpoint_every": 1, "lr": 0.01, "max_micro_batch": 0}  # fmt: skip
SWEEP = {"space": {"lr": {"type": "loguniform", "low": 0.001, "high": 0.3},
                   "width": {"type": "int", "low": 8, "high": 64, "step": 8}},
         "objective": "loss", "direction": "minimize", "algorithm": "asha", "max_trials": 4,
         "max_parallel": 2, "epochs": 2, "name": "widths"}  # fmt: skip
HPO = {"modelSpec": {"sigName": "blue", "args": "--exec-start edtPyTorch --model-main main.py"},
       "algoDef": {"algorithm": "Random", "maxRunTime": -1, "maxJobNum": 2,
                   "maxParalleJobNum": 1, "objectiveMetric": "loss", "objective": "minimize"},
       "hyperParams": [{"name": "lr", "type": "Range", "dataType": "DOUBLE", "minDbVal": 0.001,
                        "maxDbVal": 0.1}]}  # fmt: skip


# Asking --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """One request: what the test sends, and how it is named in a failure."""

    method: str
    path: str
    query: str = ""
    body: bytes | None = None
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    page: bool = False
    what: str = ""  # the value tried, where the path, query or body do not show it briefly

    def name(self) -> str:
        shown = (self.query[:80] + "...") if len(self.query) > 80 else self.query
        what = self.what or (self.body or b"")[:80].decode(errors="replace")
        return f"{self.method} {self.path[:100]}{'?' + shown if shown else ''} {what[:100]}"


def send(world: World, ask: Ask) -> tuple[int, float]:
    client = world.pages if ask.page else world.api
    url = ask.path + ("?" + ask.query if ask.query else "")
    started = time.monotonic()
    extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in ask.headers}
    kwargs: dict[str, Any] = {"HTTP_ACCEPT": "application/json", **extra}
    if ask.body is not None:
        kwargs.update(data=ask.body, content_type=ask.content_type)
    reply = getattr(client, ask.method.lower())(url, **kwargs)
    return reply.status_code, time.monotonic() - started


def check(world: World, ask: Ask) -> None:
    """Record a failure: a 5xx (or an exception the test client raises), or two slow answers."""
    try:
        with transaction.atomic():  # a failed query must not break the requests after it
            code, took = send(world, ask)
            if code < 500 and took > bound(SLOW):
                code, took = send(world, ask)
            transaction.set_rollback(code >= 500)
    except Exception as exc:  # the test client re-raises a view's exception: a 500
        world.failures.append(f"500 ({type(exc).__name__}: {str(exc)[:100]}) {ask.name()}")
        return
    if code >= 500:
        world.failures.append(f"{code} {ask.name()}")
    elif took > bound(SLOW):
        world.failures.append(f"slow ({took:.2f} s) {ask.name()}")


# The API, from its schema ------------------------------------------------------------------


def schema() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def fill(world: World, path: str, replace: dict[str, str] | None = None) -> str:
    """The path with each parameter set to Alice's object of that kind, or to ``replace``'s."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if replace and name in replace:
            return replace[name]
        before = path[: match.start()].rstrip("/").rsplit("/", 1)[-1]
        return quote(world.ids.get(before, world.ids.get(name, "1")), safe="")

    return re.sub(r"\{(\w+)\}", one, path)


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every (method, path, operation) of the schema; those that delete come last."""
    found = [(m.upper(), p, op) for p, ops in spec["paths"].items() for m, op in ops.items()]
    return iter(sorted(found, key=lambda f: f[0] == "DELETE"))


def api_asks(world: World, spec: dict[str, Any]) -> Iterator[Ask]:
    for method, path, op in operations(spec):
        params = op.get("parameters", [])
        for p in (p for p in params if p["in"] == "path"):
            for value in IDS if p["schema"].get("type") == "integer" else NAMES:
                yield Ask(method, fill(world, path, {p["name"]: value}))
        base = fill(world, path)
        for p in (p for p in params if p["in"] == "query"):
            for text in TEXTS:
                yield Ask(method, base, urlencode({p["name"]: text}))
        for p in (p for p in params if p["in"] == "header"):
            for text in TEXTS:
                yield Ask(method, base, body=b"xx", content_type="application/octet-stream",
                          headers=((p["name"], text),),
                          what=f"{p['name']}: {text[:40]!r}")  # fmt: skip
        yield from body_asks(world, spec, method, path, base, op)


def body_asks(world: World, spec: dict[str, Any], method: str, path: str, base: str,
              op: dict[str, Any]) -> Iterator[Ask]:  # fmt: skip
    content = op.get("requestBody", {}).get("content", {})
    start = world.bodies.get(f"{method} {path}", {})
    if "application/json" in content:
        fields = resolve(spec, content["application/json"]["schema"]).get("properties", {})
        for name in sorted(set(fields) | set(start)):
            for value in JSONS:
                yield Ask(method, base, body=json_text({**start, name: value}).encode(),
                          what=f"{name}={json_text(value)[:40]}")  # fmt: skip
        for whole in JSONS:
            yield Ask(method, base, body=json_text(whole).encode(), what=json_text(whole)[:40])
    elif "multipart/form-data" in content:
        fields = resolve(spec, content["multipart/form-data"]["schema"]).get("properties", {})
        yield from multipart_asks(method, base, sorted(fields), start)


def multipart_asks(method: str, base: str, fields: list[str],
                   start: dict[str, Any]) -> Iterator[Ask]:  # fmt: skip
    """Each text field with each text value beside a model folder; where the form carries a
    JSON document (a WMLA hypersearch's ``data``), each of its fields with each JSON value."""
    for name in (f for f in fields if f != "file"):
        for text in TEXTS:
            yield multipart(method, base, {"name": "fuzz", name: text}, f"{name}={text[:40]!r}")
    for value in JSONS if start else ():
        yield multipart(method, base, {"data": json_text(value)}, f"data={json_text(value)[:40]}")
    for section, values in start.items() if isinstance(start, dict) else ():
        inner = values[0] if isinstance(values, list) else values
        for name in inner:
            for value in JSONS:
                changed = {**inner, name: value}
                data = {**start, section: [changed] if isinstance(values, list) else changed}
                what = f"data.{section}.{name}={json_text(value)[:40]}"
                yield multipart(method, base, {"data": json_text(data)}, what)


def multipart(method: str, path: str, fields: dict[str, str], what: str) -> Ask:
    from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

    upload = io.BytesIO(model_tar())
    upload.name = "m.modelDir.tar"
    body = encode_multipart(BOUNDARY, {**fields, "file": upload})
    return Ask(method, path, body=body, content_type=MULTIPART_CONTENT, what=what)


# The pages --------------------------------------------------------------------------------

# What each page reads from its query (a test below keeps this true to the code).
PAGE_PARAMS = {
    "jobs/<pk>/metrics": ["points"],
    "jobs/<pk>/log": ["slot", "offset"],
    "jobs/<pk>/priority/preview": ["priority"],
    "sweeps/new/": ["from"],
    "compare/": ["ids"],
    "compare/curves": ["ids"],
    "compare.csv": ["ids"],
    "teams/": ["team"],
    "shares/": ["team"],
    "usage/": ["by", "period", "since", "until", "team", "user"],
    "usage.csv": ["by", "period", "since", "until", "team", "user"],
    "train/": sorted(TrainForm.base_fields),
}
NOT_PAGES = ("api/v1/", "platform/", "admin/", "accounts/", "metrics", "healthz", "readyz")


def page_routes() -> Iterator[tuple[str, Any]]:
    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, Any]]:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and not route.startswith(NOT_PAGES):
                yield re.sub(r"<(?:\w+:)?pk>", "<pk>", route), pattern

    yield from walk(get_resolver().url_patterns, "")


def page_path(world: World, route: str, pk: str | None = None) -> str:
    kind = route.split("/", 1)[0]
    own = world.ids.get(kind, "1")
    path = route.replace("<pk>", pk or own)
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: world.ids.get(m.group(1), "x"), path)


def page_asks(world: World) -> Iterator[Ask]:
    for route, _ in page_routes():
        if "<pk>" in route:
            for pk in IDS:
                yield Ask("GET", page_path(world, route, pk), page=True)
        for name in PAGE_PARAMS.get(route, []):
            for text in TEXTS:
                yield Ask("GET", page_path(world, route), urlencode({name: text}), page=True)


# The tests ----------------------------------------------------------------------------------


def test_every_route_answers_bad_input_with_a_4xx_within_a_second(world: World) -> None:
    spec = schema()
    asked = 0
    for ask in [*page_asks(world), *api_asks(world, spec)]:
        check(world, ask)
        asked += 1
    assert asked > 3000  # every route was asked (a schema or a table gone empty fails here)
    assert not world.failures, f"{len(world.failures)} of {asked}:\n" + "\n".join(
        world.failures[:200]
    )


def nasty() -> st.SearchStrategy[Any]:
    atoms = st.one_of(st.sampled_from(JSONS[:16]), st.integers(), st.text(max_size=20),
                      st.floats(allow_nan=False))  # fmt: skip
    return st.recursive(atoms, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                        max_leaves=8)  # fmt: skip


JSON_BODIES = ["POST /api/v1/jobs/", "POST /api/v1/sweeps/",
               "POST /api/v1/cluster/shares/preview/", "POST /api/v1/datasets/uploads/",
               "POST /api/v1/jobs/{id}/priority/"]  # fmt: skip


@pytest.mark.parametrize("operation", JSON_BODIES)
def test_bodies_with_several_bad_fields_answer_a_4xx(world: World, operation: str) -> None:
    method, path = operation.split(" ")
    start = world.bodies[operation]

    @settings(max_examples=40, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.dictionaries(st.sampled_from(sorted(start)), nasty(), min_size=1, max_size=4))
    def mixed(changes: dict[str, Any]) -> None:
        body = json_text({**start, **changes})
        check(world, Ask(method, fill(world, path), body=body.encode(), what=body[-200:]))

    mixed()
    assert not world.failures, "\n".join(world.failures[:40])


def pages_reading(read: Callable[[str], list[str]]) -> set[str]:
    names: set[str] = set()
    for source in (PROJECT_DIR / "edtweb").rglob("*.py"):
        if source.name in ("views.py", "usage.py"):
            names.update(read(source.read_text()))
    return names


def test_the_pages_table_names_every_query_parameter_a_page_reads() -> None:
    """A page that starts reading a new query parameter joins the fuzz (PAGE_PARAMS)."""
    read = re.compile(r"""(?:GET|query)(?:\.get\(|\[)["'](\w+)["']""").findall
    tabled = {name for names in PAGE_PARAMS.values() for name in names}
    assert pages_reading(read) - tabled == set()
    routes = {route for route, _ in page_routes()}
    assert set(PAGE_PARAMS) <= routes, set(PAGE_PARAMS) - routes
