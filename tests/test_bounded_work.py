"""Every request does bounded work (edtweb/limits.py): each size is judged before anything is
built from it, and a request past a limit is a 4xx naming the field and the limit, within a
second. In process, through the API as a script calls it; each test runs with this
process's address space capped a little above its size, so that a regression (a grid of
10^9 points listed, say) fails the test with a MemoryError instead of taking the machine.
The same requests against a live web process: tests/test_bounded_work_live.py."""

from __future__ import annotations

import io
import json
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from rest_framework.test import APIClient

from edtweb.api.wmla_hpo import hyper_param
from edtweb.jsonbounds import TooDeep, depth, loads
from edtweb.limits import LIMITS
from edtweb.sweeps.space import SpaceRefused, judged
from tests.harness.api import token_client
from tests.harness.processes import PROJECT_DIR
from tests.harness.sweeps import sweep_inputs
from tests.harness.waiting import bound
from tests.harness.wmla_hpo import basic, model_folder, request

pytestmark = pytest.mark.django_db
API = "/api/v1/"
WMLA = "/platform/rest/deeplearning/v1/hypersearch"
GiB = 1024**3
DEEP = "[" * 50_000 + "]" * 50_000
HUGE = 20 * 1024**2  # bytes


@pytest.fixture(autouse=True)
def memory_capped() -> Iterator[None]:
    """This process's address space capped 2 GiB above its size now, for the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = psutil.Process().memory_info().vms + 2 * GiB
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard < 0 else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture
def sweeping(alice: Any, store: Any) -> Callable[..., Any]:
    """POST a sweep of Alice's (a READY dataset, a VALID model) with ``changes``; the answer
    once it came within a second."""
    inputs = sweep_inputs(alice)
    client = token_client(alice)
    client.get(API + "auth/me/")  # the first request loads what every later one uses

    def post(fmt: str = "json", **changes: Any) -> Any:
        asked = {"model": inputs["model"].pk, "dataset": inputs["dataset"].pk,
                 "space": {"lr": {"type": "loguniform", "low": 1e-3, "high": 0.3}},
                 "objective": "loss", **changes}  # fmt: skip
        return timed(lambda: client.post(API + "sweeps/", asked, format=fmt))

    return post


def timed(call: Callable[[], Any]) -> Any:
    started = time.monotonic()
    answer = call()
    took = time.monotonic() - started
    assert took < bound(1.0), f"answered in {took:.2f} s"
    return answer


def refusal(answer: Any, status: int, field: str) -> str:
    """The message of a refusal with ``status`` naming ``field``."""
    assert answer.status_code == status, answer.content[:500]
    body = answer.json()
    assert field in body.get("fields", {}), body
    return " ".join(body["fields"][field])


# A sweep's sizes, through the API ---------------------------------------------------------


def test_a_grid_of_a_billion_points_is_refused_by_arithmetic(sweeping: Any) -> None:
    space = {"x": {"type": "int", "low": 0, "high": 10**9}}
    why = refusal(sweeping(space=space, algorithm="grid"), 400, "space")
    assert why.startswith("the grid has 1000000001 points, more than the 5000"), why


def test_a_grid_is_sized_as_the_product_of_its_parameters(sweeping: Any) -> None:
    space = {f"p{i}": {"type": "int", "low": 0, "high": 9} for i in range(12)}  # 10^12
    why = refusal(sweeping(space=space, algorithm="grid"), 400, "space")
    assert "the grid has 1000000000000 points" in why
    small = {"a": {"type": "int", "low": 0, "high": 9},
             "b": {"type": "choice", "choices": [1, 1.0, True]}}  # fmt: skip
    made = sweeping(space=small, algorithm="grid")
    assert made.status_code == 201 and made.json()["max_trials"] == 30


def test_choices_are_counted_before_they_are_judged(sweeping: Any) -> None:
    most = LIMITS["choices"].high
    space = {"opt": {"type": "choice", "choices": list(range(most + 1))}}
    why = refusal(sweeping(space=space), 400, "space")
    assert why == f"opt: {most + 1} choices, more than the {most} a parameter may have"
    most_choices = {"opt": {"type": "choice", "choices": list(range(most))}}
    assert sweeping(space=most_choices).status_code == 201


def test_a_million_choices_is_a_body_too_large_for_the_api(sweeping: Any) -> None:
    space = {"opt": {"type": "choice", "choices": list(range(10**6))}}
    refusal(sweeping(space=space), 413, "body")


def test_ten_thousand_parameters_are_refused(sweeping: Any) -> None:
    space = {f"p{i}": {"type": "uniform", "low": 0, "high": 1} for i in range(10_000)}
    why = refusal(sweeping(space=space), 400, "space")
    assert why == "10000 hyperparameters, more than the 100 a sweep may search"


@pytest.mark.parametrize("low, high", [(-1e308, 1e308), (0, 1e16), (-(2**70), 0)])
def test_a_range_past_what_a_float_samples_is_refused_up_front(
    sweeping: Any, low: float, high: float
) -> None:
    space = {"x": {"type": "uniform", "low": low, "high": high}}
    why = refusal(sweeping(space=space), 400, "space")
    assert "a range's numbers must be within ±1e+15" in why, why


@pytest.mark.parametrize("field", ["seed", "min_resource"])
def test_seeds_and_resources_past_64_bits_are_refused(sweeping: Any, field: str) -> None:
    why = refusal(sweeping(**{field: 2**70}), 400, field)
    assert f"from 0 to {2**31 - 1}" in why and "1180591620717411303424" in why, why
    assert sweeping(**{field: 2**31 - 1}).status_code == 201


# Bodies and JSON, before they are parsed --------------------------------------------------


def test_a_20_mib_body_is_a_413_on_the_token_endpoint_and_the_api(alice: Any) -> None:
    body = json.dumps({"username": "alice", "password": "x" * HUGE})
    for client, path in (
        (APIClient(), API + "auth/token/"),
        (token_client(alice), API + "sweeps/"),
    ):
        answer = timed(lambda c=client, p=path: c.post(p, body, content_type="application/json"))
        assert "more than the 2097152 a request may send" in refusal(answer, 413, "body")
    form_type = "application/x-www-form-urlencoded"
    form = timed(lambda: APIClient().post(API + "auth/token/", "a=" + "x" * HUGE,
                                          content_type=form_type))  # fmt: skip
    refusal(form, 413, "body")


@pytest.mark.parametrize("path", ["auth/token/", "sweeps/", "jobs/"])
def test_json_nested_50000_deep_is_a_400_before_it_is_parsed(alice: Any, path: str) -> None:
    client = token_client(alice) if path != "auth/token/" else APIClient()
    answer = timed(lambda: client.post(API + path, DEEP, content_type="application/json"))
    assert refusal(answer, 400, "body") == (
        "JSON nested 50000 levels deep, more than the 64 levels EDT reads"
    )


def test_json_nested_deep_in_a_form_field_is_a_400(sweeping: Any) -> None:
    why = refusal(sweeping(fmt="multipart", space=DEEP), 400, "space")
    assert "JSON nested 50000 levels deep" in why


def test_json_as_deep_as_the_limit_is_read(alice: Any) -> None:
    limit = int(LIMITS["json_depth"].high)
    nested = "[" * (limit - 1) + "{}" + "]" * (limit - 1)
    answer = APIClient().post(API + "auth/token/", nested, content_type="application/json")
    assert answer.status_code == 400 and "nested" not in answer.json()["error"]


# WMLA's hypersearch: Range with power and step -------------------------------------------


RANGES = [
    # (what is asked beyond name/type, a part of the refusal)
    ({"dataType": "DOUBLE", "minDbVal": -400, "maxDbVal": 400, "power": "10"},
     "power 10 to the 400 is out of range"),
    ({"dataType": "INT", "minIntVal": 0, "maxIntVal": 10**9, "power": "2"},
     "power 2 to the 1e+09 is out of range"),
    ({"dataType": "INT", "minIntVal": 0, "maxIntVal": 2**70, "power": "2"},
     "power 2 to the 1.18059e+21 is out of range"),
    ({"dataType": "INT", "minIntVal": 0, "maxIntVal": 10**8, "power": "1.0000001"},
     "gives more than the 1000 values a parameter may have"),
    ({"dataType": "DOUBLE", "minDbVal": 0, "maxDbVal": 30, "step": 1e-6, "power": "2"},
     "gives more than the 1000 values a parameter may have"),
    ({"dataType": "DOUBLE", "minDbVal": 0, "maxDbVal": 1, "step": 1e-300, "power": "2"},
     "gives more than the 1000 values a parameter may have"),
]  # fmt: skip


@pytest.mark.parametrize("asked, message", RANGES)
def test_a_wmla_range_is_sized_and_bounded_before_its_powers_are_taken(
    asked: dict[str, Any], message: str
) -> None:
    started = time.monotonic()
    _, entry, _, errors = hyper_param({"name": "x", "type": "Range", **asked}, 0)
    assert time.monotonic() - started < bound(1.0)
    assert entry is None and len(errors) == 1 and message in errors[0], errors


def test_a_wmla_range_within_bounds_is_its_powers() -> None:
    asked = {"name": "x", "type": "Range", "dataType": "INT", "minIntVal": 0, "maxIntVal": 4,
             "power": "2"}  # fmt: skip
    assert hyper_param(asked, 0)[1] == {"type": "choice", "choices": [1, 2, 4, 8, 16]}


def test_a_wmla_hypersearch_past_its_bounds_is_a_400(alice: Any) -> None:
    sweep_inputs(alice)  # the dataset "shapes" its args name
    client = basic("alice")
    huge = {"name": "lr", "type": "Range", "dataType": "DOUBLE", "minDbVal": -400,
            "maxDbVal": 400, "power": "10"}  # fmt: skip
    seed = [{"name": "RandomSeed", "value": str(2**70)}]
    steps = [{"name": "ResourceName", "value": "epochs"},
             {"name": "ResourceValue", "value": str(2**70)}]  # fmt: skip
    for data, field in ((request(hyperParams=[huge]), "hyperParams"),
                        (request(algoParams=seed), "algoDef.algoParams (RandomSeed)"),
                        (request(algoParams=steps), "algoDef.algoParams: ResourceValue"),
                        (DEEP, "data")):  # fmt: skip
        upload = {"file": _folder(), "data": data if isinstance(data, str) else json.dumps(data)}
        answer = timed(lambda u=upload: client.post(WMLA, u, format="multipart"))
        assert answer.status_code == 400, answer.content[:300]
        assert answer.json()["error"].startswith(field), answer.json()


def _folder() -> Any:
    upload = io.BytesIO(model_folder())
    upload.name = "model.modelDir.tar"
    return upload


# The rules themselves, without the API ----------------------------------------------------


def test_a_million_choices_and_ten_thousand_parameters_are_refused_at_once() -> None:
    million = {"space": {"x": {"type": "choice", "choices": list(range(10**6))}}, "objective": "l"}
    params = {"space": {f"p{i}": {"type": "uniform", "low": 0, "high": 1} for i in range(10**4)},
              "objective": "l"}  # fmt: skip
    for values in (million, params):
        started = time.monotonic()
        with pytest.raises(SpaceRefused):
            judged(values)
        assert time.monotonic() - started < bound(1.0)


def test_duplicate_choices_are_found_by_hashing() -> None:
    """Among 1000 distinct choices and one repeated at the end, in linear time: the old
    pairwise check took seconds on 16k, and hangs on a million."""
    choices = [f"c{i}" for i in range(999)] + ["c0"]
    with pytest.raises(SpaceRefused) as caught:
        judged({"space": {"x": {"type": "choice", "choices": choices}}, "objective": "l"})
    assert caught.value.errors["space"] == ["x: choice 'c0' is listed twice"]
    distinct = {"x": {"type": "choice", "choices": [1, 1.0, True, "1"]}}
    assert judged({"space": distinct, "objective": "l"}).space[0].choices == (1, 1.0, True, "1")


DEPTHS = [
    ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4), ('["[[[", "]]"]', 1),
    ('["\\"[[["]', 1), ('"[[[[', 0), ("[[[[", 4), ("]][[", 0), (DEEP, 50_000),
    ('{"a": "\\\\"}', 1), ("[" + '"\\"' * 1000, 1),
]  # fmt: skip


@pytest.mark.parametrize("text, expected", DEPTHS)
def test_depth_counts_brackets_outside_strings(text: str, expected: int) -> None:
    assert depth(text) == expected


def test_loads_refuses_deep_json_and_reads_the_rest() -> None:
    with pytest.raises(TooDeep, match="data: JSON nested 50000 levels deep"):
        loads(DEEP, "data")
    assert loads(b'{"a": [1, 2]}') == {"a": [1, 2]}


def test_depth_is_linear_on_hostile_text() -> None:
    """Quotes that never close, brackets, escapes: 2 MiB each, well under a second."""
    size = int(LIMITS["body_bytes"].high)
    for text in ('"' + '\\"' * (size // 2), "[]" * (size // 2), '"",' * (size // 3)):
        started = time.monotonic()
        depth(text)
        assert time.monotonic() - started < bound(1.0)


def test_every_limit_is_documented_with_its_span() -> None:
    documented = (PROJECT_DIR / "docs" / "api.md").read_text()
    missing = [f"| `{name}` | {limit.span} |" for name, limit in LIMITS.items()
               if f"| `{name}` | {limit.span} |" not in documented]  # fmt: skip
    assert missing == [], f"docs/api.md, Limits, lacks the rows {missing}"
