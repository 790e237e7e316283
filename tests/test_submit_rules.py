"""One validator for a submission: the Train page, the REST API and the WMLA execs API refuse
the same impossible parameters with the same message, taken from one table of bounds; each
judges a submission once, and a value left out is the same default on every path (the CLI's
is tests/test_cli.py's, against a live EDT)."""

from __future__ import annotations

import argparse
import re
import urllib.parse
from html.parser import HTMLParser
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.training import services
from edtweb.training.models import Job
from edtweb.training.validation import BOUNDS, DEFAULTS, submission_errors
from tests.harness.processes import PROJECT_DIR
from tests.harness.waiting import wait_for
from workers.learner import drive, submission
from workers.learner.spec import JobSpec

pytestmark = pytest.mark.django_db
FORM_DEFAULTS = {"epochs": 5, "batch_size": 64, "max_workers": 2, "min_workers": 1,
                 "priority": 5000, "checkpoint_every": 1, "lr": 0.01, "max_micro_batch": 0,
                 "precision": "fp32", "batch_min": 0, "batch_max": 0, "name": ""}  # fmt: skip
WMLA_OPTIONS = {"epochs": "--epochs {}", "batch_size": "--batch-size {}", "lr": "--lr {}"}
# EDT's own, in one --edt-options
WMLA_EDT_OPTIONS = {"max_workers": "maxWorkers", "priority": "priority",
                    "batch_min": "batchMin", "batch_max": "batchMax"}  # fmt: skip
RANGE_NEEDS_BASE = (
    "must lie in the batch range 128 to 256: it is the batch the learning rate is given for"
)

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
    ({"max_micro_batch": -1}, "max_micro_batch", "must be 0 to 65536"),
    ({"max_micro_batch": 2**70}, "max_micro_batch", "must be 0 to 65536"),
    # goodput mode's batch range
    ({"batch_min": 64}, "batch_max",
     "set it with batch_min: the batch range's high end (goodput mode)"),
    ({"batch_max": 128}, "batch_min",
     "set it with batch_max: the batch range's low end (goodput mode)"),
    ({"batch_min": 128, "batch_max": 64}, "batch_min", "cannot exceed batch max (64)"),
    ({"batch_min": 128, "batch_max": 256}, "batch_size", RANGE_NEEDS_BASE),
    ({"batch_min": 32, "batch_max": 512}, "batch_max", "larger than the 256 training samples"),
    ({"batch_min": 8, "batch_max": 100_000}, "batch_max", "must be 0 to 65536"),
    ({"batch_min": -1, "batch_max": 128}, "batch_min", "must be 0 to 65536"),
]  # fmt: skip


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
    reply = wmla_post(alice, asked)
    assert reply.status_code == 400, reply.content
    return dict(reply.json()["fields"])


def wmla_post(alice: Any, asked: dict[str, Any]) -> Any:
    options = " ".join(WMLA_OPTIONS[k].format(v) for k, v in asked.items() if k in WMLA_OPTIONS)
    edt = ",".join(f"{WMLA_EDT_OPTIONS[k]}={v}" for k, v in asked.items() if k in WMLA_EDT_OPTIONS)
    options += f" --edt-options {edt}" if edt else ""
    args = ("--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path=shapes "
            f"--model-main main.py {options}")  # fmt: skip
    client = APIClient()
    client.force_authenticate(alice)
    source = SimpleUploadedFile("main.py", (PROJECT_DIR / "examples" / "mlp.py").read_bytes())
    url = "/platform/rest/deeplearning/v1/execs?args=" + urllib.parse.quote(args)
    return client.post(url, {"file": source}, format="multipart")


@pytest.mark.parametrize(("asked", "field", "message"), IMPOSSIBLE)
def test_the_page_and_the_api_refuse_it_with_the_same_message(
    alice: Any, sources: dict[str, int], asked: dict[str, Any], field: str, message: str
) -> None:
    assert page_errors(alice, sources, asked) == {field: [message]}
    assert api_errors(alice, sources, asked) == {field: [message]}
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("asked", "field", "message"),
    [case for case in IMPOSSIBLE if set(case[0]) <= {*WMLA_OPTIONS, *WMLA_EDT_OPTIONS}],
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


def test_the_schema_states_each_bound_and_default() -> None:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    fields = schema["components"]["schemas"]["JobSubmitRequest"]["properties"]
    for name, bound in BOUNDS.items():
        stated = (fields[name].get("minimum"), fields[name].get("maximum"), fields[name]["default"])
        assert stated == (bound.low, bound.high, DEFAULTS[name]), name


def test_the_bounds_and_defaults_are_written_in_one_place() -> None:
    """No other source file declares a submission bound or a default (they read
    ``workers/learner/submission.py``: ``BOUNDS`` and ``DEFAULTS``)."""
    sources = [*PROJECT_DIR.glob("edtweb/**/*.py"), *PROJECT_DIR.glob("edtcli/*.py"),
               *PROJECT_DIR.glob("workers/**/*.py"),
               *PROJECT_DIR.glob("templates/**/*.html")]  # fmt: skip
    literal = re.compile(r"\b10_?000\b|1e-8")  # the priority's and the learning rate's
    declared = re.compile(r"(min|max)_value\s*=\s*[\d.]|ValueValidator\(\d")  # on a field
    defaulted = re.compile(r"(default|initial)=[\d\"]")  # a literal default
    # A field declared (``epochs = ...``) or an option named (``"--epochs"``) on the line
    named = re.compile("|".join(rf"\b{f}\s*=|--{f.replace('_', '-')}\b" for f in DEFAULTS))
    annotated = re.compile(rf"\b({'|'.join(DEFAULTS)}): \w+ = [\d\"]")  # a dataclass's
    found = [
        f"{path.relative_to(PROJECT_DIR)}: {line.strip()}"
        for path in sources
        if path.name != "submission.py" and "migrations" not in path.parts
        for line in path.read_text().splitlines()
        if literal.search(line)
        or ((declared.search(line) or defaulted.search(line)) and named.search(line))
        or annotated.search(line)
    ]
    assert found == []
    assert set(BOUNDS) >= {"max_workers", "min_workers", "epochs", "batch_size", "lr", "priority"}


# Once per submit path, the same defaults on every path ------------------------------------


@pytest.fixture
def judgements(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The values of every judgement of a submission by the rules, in order (each a call of
    ``submission_errors``, the one rule function)."""
    calls: list[dict[str, Any]] = []
    rules = submission.submission_errors

    def judged(values: Any, train_samples: int = 0) -> dict[str, str]:
        calls.append(dict(values))
        return rules(values, train_samples)

    monkeypatch.setattr(submission, "submission_errors", judged)
    return calls


class Inputs(HTMLParser):
    """A rendered form's fields and the values it would send as it stands."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.select = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "input" and a.get("name") and a.get("type") != "submit":
            self.values[str(a["name"])] = a.get("value") or ""
        elif tag == "select":
            self.select = str(a["name"])
        elif tag == "option" and "selected" in a:
            self.values[self.select] = a.get("value") or ""


def submit_the_page_as_it_stands(alice: Any, sources: dict[str, int]) -> Job:
    """Open the Train page and press Train, changing nothing."""
    client = Client()
    client.force_login(alice)
    inputs = Inputs()
    inputs.feed(client.get("/train/").content.decode())
    assert (inputs.values["model"], inputs.values["dataset"]) == (
        str(sources["model"]), str(sources["dataset"]))  # fmt: skip
    reply = client.post("/train/", inputs.values)
    assert reply.status_code == 302, reply.context["form"].errors
    return Job.objects.latest("pk")


def submit_to_the_api(alice: Any, sources: dict[str, int]) -> Job:
    client = APIClient()
    client.force_authenticate(alice)
    reply = client.post("/api/v1/jobs/", sources, format="json")
    assert reply.status_code == 201, reply.content
    return Job.objects.get(pk=reply.json()["id"])


def submit_to_wmla(alice: Any, sources: dict[str, int]) -> Job:
    reply = wmla_post(alice, {})
    assert reply.status_code == 200, reply.content
    return Job.objects.get(pk=reply.json()["id"])


def submit_through_the_service(alice: Any, sources: dict[str, int]) -> Job:
    """A trusted caller (tests, benchmarks) hands the service its paths, nothing more."""
    return services.submit_job(alice, name="plain", model_path="m.py", data_path="d")


SUBMITS = {"form": submit_the_page_as_it_stands, "api": submit_to_the_api,
           "wmla": submit_to_wmla, "service": submit_through_the_service}  # fmt: skip


def values_of(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in DEFAULTS}


@pytest.mark.django_db(transaction=True)  # WMLA's model check runs beside the request
def test_with_nothing_optional_each_path_judges_once_and_stores_the_defaults(
    alice: Any, sources: dict[str, int], judgements: list[dict[str, Any]],
    redis_server: Any, monkeypatch: pytest.MonkeyPatch, control_worker: Any,
) -> None:  # fmt: skip
    """WMLA's upload is checked by the control worker, as on a cluster."""
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{connection.settings_dict['NAME']}")
    for path, submit in SUBMITS.items():
        judgements.clear()
        job = submit(alice, sources)
        # The Train page offers its group's slots as max workers (1 where none is alive).
        given = {**DEFAULTS, "max_workers": job.max_workers} if path == "form" else DEFAULTS
        assert judgements == [given], path  # once, on the defaults filled in
        assert values_of(job) == given, path
        spec = JobSpec.load(job.spec_path)  # the learners' values: built from the submission
        assert {k: getattr(spec, k) for k in given if hasattr(spec, k)} == {
            k: v for k, v in given.items() if hasattr(spec, k)}, path  # fmt: skip
    checked = ModelDefinition.objects.exclude(pk=sources["model"])  # WMLA's upload
    wait_for(lambda: not checked.filter(status=ModelDefinition.Status.CHECKING), 120, "check")


@pytest.mark.parametrize("path", ["form", "api", "wmla"])
def test_a_refused_submission_is_judged_once(
    alice: Any, sources: dict[str, int], judgements: list[dict[str, Any]], path: str
) -> None:
    asked = {"max_workers": 2, "min_workers": 3} if path != "wmla" else {"epochs": 0}
    errors = {"form": page_errors, "api": api_errors}.get(path)
    got = errors(alice, sources, asked) if errors else wmla_errors(alice, asked)
    assert got and len(judgements) == 1
    assert not Job.objects.exists()


def test_the_local_driver_takes_the_same_defaults_and_rules() -> None:
    """``python -m workers.learner.drive`` and a bare ``JobSpec`` default to ``DEFAULTS``,
    and the driver refuses what the web refuses, with the same message."""
    given = vars(drive.parser().parse_args(["--model", "m.py", "--data", "d"]))
    assert {k: given[k] for k in DEFAULTS if k in given} == {
        k: v for k, v in DEFAULTS.items() if k in given}  # fmt: skip
    assert set(DEFAULTS) - set(given) == {"max_workers", "min_workers", "priority"}
    bare = JobSpec(job_id="j", model="m.py", data="d", workdir="w")
    assert {k: getattr(bare, k) for k in given if k in DEFAULTS} == {
        k: DEFAULTS[k] for k in given if k in DEFAULTS}  # fmt: skip
    with pytest.raises(SystemExit) as refused:
        drive.main(["--model", "m.py", "--data", "d", "--epochs", "0"])
    assert refused.value.code == 2


def test_a_precision_outside_the_choices_is_refused() -> None:
    with pytest.raises(submission.Refused, match="must be one of fp32, bf16, fp16, not 'fp8'"):
        submission.validated({"precision": "fp8"})
    assert submission.validated({}) == submission.Submission(**DEFAULTS)


def test_the_api_docs_state_the_defaults_and_bounds() -> None:
    """docs/api.md's table of a submission's values says what ``DEFAULTS`` and ``BOUNDS``
    hold, field for field."""
    text = (PROJECT_DIR / "docs" / "api.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \| ([^|]+) \|", text, re.MULTILINE)
    assert {name: default for name, default, _ in rows} == {
        k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in DEFAULTS.items()}  # fmt: skip
    assert {name: span.strip() for name, _, span in rows if name in BOUNDS} == {
        k: b.span for k, b in BOUNDS.items()}  # fmt: skip


# Goodput mode's batch range ------------------------------------------------------------------

GOODPUT = {"batch_min": 32, "batch_max": 256, "batch_size": 64}


def test_a_batch_range_passes_everywhere_and_reaches_the_learners(
    alice: Any, sources: dict[str, int]
) -> None:
    """The form, the API and WMLA take a goodput-mode submission; the job's row and its
    learners' spec carry the range, the batch size being the learning rate's base."""
    client = Client()
    client.force_login(alice)
    reply = client.post("/train/", {**FORM_DEFAULTS, **sources, **GOODPUT})
    assert reply.status_code == 302, reply.context["form"].errors
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.post("/api/v1/jobs/", {**sources, **GOODPUT}, format="json")
    assert answer.status_code == 201, answer.content
    assert {k: answer.json()[k] for k in GOODPUT} == GOODPUT
    wmla = wmla_post(alice, GOODPUT)
    assert wmla.status_code == 200, wmla.content
    jobs = Job.objects.order_by("pk")
    assert len(jobs) == 3
    for job in jobs:
        assert job.goodput and {k: getattr(job, k) for k in GOODPUT} == GOODPUT
        spec = JobSpec.load(job.spec_path)
        assert spec.goodput and (spec.batch_min, spec.batch_max, spec.batch_size) == (32, 256, 64)
    page = client.get(f"/jobs/{jobs[0].pk}/").content.decode()
    assert 'id="chart-batch"' in page and "32 to 256, the scheduler's choice" in page
    fixed = services.submit_job(alice, name="fixed", model_path="m.py", data_path="d")
    assert (
        not fixed.goodput
        and 'id="chart-batch"' not in client.get(f"/jobs/{fixed.pk}/").content.decode()
    )


def test_the_rules_of_a_batch_range() -> None:
    ok = submission.validated({"batch_min": 64, "batch_max": 4096, "batch_size": 64})
    assert ok.goodput and (ok.batch_min, ok.batch_max) == (64, 4096)
    assert not submission.validated({}).goodput
    assert submission.validated({"batch_min": 64, "batch_max": 64, "batch_size": 64}).goodput
    with pytest.raises(submission.Refused, match="batch_size: must lie in the batch range"):
        submission.validated({"batch_min": 64, "batch_max": 4096, "batch_size": 8192})
    # the dataset bounds the range's high end, as it does the batch
    assert submission_errors({"batch_min": 64, "batch_max": 4096, "batch_size": 64}, 1000) == {
        "batch_max": "larger than the 1000 training samples"}  # fmt: skip


def test_the_cli_takes_a_batch_range_as_low_dash_high() -> None:
    from edtcli.cli import batch_range

    assert batch_range("64-4096") == (64, 4096)
    for text in ("64", "64-", "a-b", "64:4096"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"write LOW-HIGH, e\.g\. 64-4096"):
            batch_range(text)


def test_the_local_driver_refuses_a_bad_range_and_a_batch_without_one() -> None:
    for argv in (["--batch-min", "64"], ["--schedule", "0:1@128"]):
        with pytest.raises(SystemExit) as refused:
            drive.main(["--model", "m.py", "--data", "d", *argv])
        assert refused.value.code == 2
