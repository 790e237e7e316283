"""One validator for a submission: the Train page, the REST API and the WMLA execs API refuse
the same impossible parameters with the same message, taken from one table of bounds."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.training.models import Job
from edtweb.training.validation import BOUNDS, submission_errors
from tests.harness.processes import PROJECT_DIR

pytestmark = pytest.mark.django_db
FORM_DEFAULTS = {"epochs": 5, "batch_size": 64, "max_workers": 2, "min_workers": 1,
                 "priority": 5000, "checkpoint_every": 1, "lr": 0.01, "max_micro_batch": 0,
                 "precision": "fp32", "name": ""}  # fmt: skip
WMLA_OPTIONS = {"epochs": "--epochs {}", "batch_size": "--batch-size {}", "lr": "--lr {}",
                "max_workers": "--edt-options maxWorkers={}",
                "priority": "--edt-options priority={}"}  # fmt: skip

# (what is asked, the field refused, the message expected)
IMPOSSIBLE = [
    ({"max_workers": 0}, "max_workers", "must be 1 to 1024"),
    ({"max_workers": 5000}, "max_workers", "must be 1 to 1024"),
    ({"max_workers": 2, "min_workers": 3}, "min_workers", "cannot exceed max workers (2)"),
    ({"epochs": 0}, "epochs", "must be 1 to 10000"),
    ({"epochs": 20_000}, "epochs", "must be 1 to 10000"),
    ({"batch_size": 0}, "batch_size", "must be 1 to 65536"),
    ({"batch_size": 100_000}, "batch_size", "must be 1 to 65536"),
    ({"batch_size": 512}, "batch_size", "larger than the 256 training samples"),
    ({"lr": 0}, "lr", "must be 1e-08 to 10"),
    ({"lr": 100}, "lr", "must be 1e-08 to 10"),
    ({"priority": 0}, "priority", "must be 1 to 10000"),
    ({"priority": 10_001}, "priority", "must be 1 to 10000"),
    ({"checkpoint_every": 0}, "checkpoint_every", "must be 1 to 1000"),
    ({"max_micro_batch": -1}, "max_micro_batch", "must be 0 or more"),
]


@pytest.fixture
def sources(alice: Any) -> dict[str, int]:
    """Alice's READY dataset named "shapes" (256 training samples) and a VALID model."""
    dataset = Dataset.objects.create(
        owner=alice, name="shapes", status=Dataset.Status.READY, format="cifar10",
        summary={"splits": {"train": {"count": 256}, "test": {"count": 64}}},
    )  # fmt: skip
    model = ModelDefinition.objects.create(
        owner=alice, name="mlp", entry="mlp.py", status=ModelDefinition.Status.VALID
    )
    return {"model": model.pk, "dataset": dataset.pk}


def page_errors(alice: Any, sources: dict[str, int], asked: dict[str, Any]) -> dict[str, Any]:
    client = Client()
    client.force_login(alice)
    reply = client.post("/train/", {**FORM_DEFAULTS, **sources, **asked})
    assert reply.status_code == 200, "the page accepted it"  # a redirect means submitted
    return {k: list(v) for k, v in reply.context["form"].errors.items()}


def api_errors(alice: Any, sources: dict[str, int], asked: dict[str, Any]) -> dict[str, Any]:
    client = APIClient()
    client.force_authenticate(alice)
    reply = client.post("/api/v1/jobs/", {**sources, "max_workers": 2, **asked}, format="json")
    assert reply.status_code == 400, reply.content
    return dict(reply.json()["fields"])


def wmla_errors(alice: Any, asked: dict[str, Any]) -> dict[str, Any]:
    options = " ".join(WMLA_OPTIONS[k].format(v) for k, v in asked.items())
    args = ("--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path=shapes "
            f"--model-main main.py {options}")  # fmt: skip
    client = APIClient()
    client.force_authenticate(alice)
    source = SimpleUploadedFile("main.py", (PROJECT_DIR / "examples" / "mlp.py").read_bytes())
    url = "/platform/rest/deeplearning/v1/execs?args=" + urllib.parse.quote(args)
    reply = client.post(url, {"file": source}, format="multipart")
    assert reply.status_code == 400, reply.content
    return dict(reply.json()["fields"])


@pytest.mark.parametrize(("asked", "field", "message"), IMPOSSIBLE)
def test_the_page_and_the_api_refuse_it_with_the_same_message(
    alice: Any, sources: dict[str, int], asked: dict[str, Any], field: str, message: str
) -> None:
    assert page_errors(alice, sources, asked) == {field: [message]}
    assert api_errors(alice, sources, asked) == {field: [message]}
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("asked", "field", "message"),
    [case for case in IMPOSSIBLE if set(case[0]) <= set(WMLA_OPTIONS)],
)
def test_the_wmla_execs_api_refuses_it_with_the_same_message(
    alice: Any, sources: dict[str, int], asked: dict[str, Any], field: str, message: str
) -> None:
    assert wmla_errors(alice, asked) == {field: [message]}
    assert not Job.objects.exists() and not ModelDefinition.objects.exclude(pk=sources["model"])


def test_a_possible_submission_passes_everywhere(alice: Any, sources: dict[str, int]) -> None:
    assert submission_errors({**FORM_DEFAULTS, "max_workers": 1024, "lr": 10.0}, 256) == {}
    client = Client()
    client.force_login(alice)
    form = client.get("/train/").context["form"]
    assert form.fields["priority"].widget.attrs["max"] == "10000"  # the input's own bounds


def test_the_bounds_are_written_in_one_place() -> None:
    """No other source file declares a submission bound (they read ``validation.BOUNDS``)."""
    sources = [*PROJECT_DIR.glob("edtweb/**/*.py"), *PROJECT_DIR.glob("edtcli/*.py"),
               *PROJECT_DIR.glob("templates/**/*.html")]  # fmt: skip
    literal = re.compile(r"\b10_?000\b|1e-8")  # the priority's and the learning rate's
    declared = re.compile(r"(min|max)_value\s*=\s*[\d.]|ValueValidator\(\d")  # on a field
    found = [
        f"{path.relative_to(PROJECT_DIR)}: {line.strip()}"
        for path in sources
        if path.name != "validation.py" and "migrations" not in path.parts
        for line in path.read_text().splitlines()
        if literal.search(line) or (declared.search(line) and any(f in line for f in BOUNDS))
    ]
    assert found == []
    assert set(BOUNDS) >= {"max_workers", "min_workers", "epochs", "batch_size", "lr", "priority"}
