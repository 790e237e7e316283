"""The REST API in process: tokens, owner scoping (Alice owns things, Bob sees none of them),
errors that name what to fix, uploads refused while they stream, jobs submitted and steered.

The CLI against a live server is tests/test_cli.py; the WMLA subset is tests/test_wmla.py.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.handlers.wsgi import LimitedStream
from django.test import RequestFactory
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from edtweb.api import datasets as dataset_views
from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.training import services
from edtweb.training.models import Job, JobEvent, Metric
from tests.harness.api import token_client
from tests.harness.processes import PROJECT_DIR
from tests.harness.waiting import wait_for
from workers.learner.datasets import write_cifar10
from workers.learner.spec import JobSpec

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(alice: Any, redis_server: Any) -> dict[str, Any]:
    """Alice's dataset (READY, 256 training samples), model (VALID) and job, whose folder
    holds a learner log, a checkpoint and a final model."""
    dataset = Dataset.objects.create(
        owner=alice,
        name="shapes",
        status=Dataset.Status.READY,
        format="cifar10",
        summary={"splits": {"train": {"count": 256}, "test": {"count": 64}}},
    )
    dataset.thumbs_dir.mkdir(parents=True, exist_ok=True)
    (dataset.thumbs_dir / "000-0.png").write_bytes(b"\x89PNG fake")
    model = ModelDefinition.objects.create(
        owner=alice, name="mlp", entry="mlp.py", status=ModelDefinition.Status.VALID
    )
    model.entry_path.parent.mkdir(parents=True, exist_ok=True)
    model.entry_path.write_bytes((PROJECT_DIR / "examples" / "mlp.py").read_bytes())
    job = services.submit_from_form(alice, submission(model, dataset))
    (job.workdir / "logs").mkdir(exist_ok=True)
    (job.workdir / "logs" / "h.0.log").write_text("epoch 0 step 0 loss 2.30\n")
    (job.workdir / "checkpoints").mkdir(exist_ok=True)
    (job.workdir / "checkpoints" / "step-4.pt").write_bytes(b"checkpoint")
    (job.workdir / "model.pt").write_bytes(b"final model")
    return {"d": dataset.pk, "m": model.pk, "j": job.pk}


def submission(model: Any, dataset: Any, **changes: Any) -> dict[str, Any]:
    form = {"model": model, "dataset": dataset, "epochs": 2, "batch_size": 32, "max_workers": 2}
    form.update(min_workers=1, priority=5000, checkpoint_every=1, lr=0.01, max_micro_batch=0)
    return {**form, **changes}


API = "/api/v1/"
WMLA = "/platform/rest/deeplearning/v1/"
# Every endpoint that names one of Alice's objects: (method, path, body, what Alice gets).
# Those that change or delete things come last.
OWNED = [
    ("get", API + "datasets/{d}/", None, 200),
    ("get", API + "datasets/{d}/thumbnails/000-0.png", None, 200),
    ("get", API + "datasets/uploads/{d}/", None, 200),
    ("put", API + "datasets/uploads/{d}/", b"xx", 409),  # READY: it takes no more bytes
    ("post", API + "datasets/uploads/{d}/complete/", None, 200),
    ("get", API + "models/{m}/", None, 200),
    ("get", API + "models/{m}/source/", None, 200),
    ("get", API + "jobs/{j}/", None, 200),
    ("get", API + "jobs/{j}/priority/preview/?priority=9000", None, 200),
    ("get", API + "jobs/{j}/events/", None, 200),
    ("get", API + "jobs/{j}/metrics/", None, 200),
    ("get", API + "jobs/{j}/metrics/records/", None, 200),
    ("get", API + "jobs/{j}/logs/", None, 200),
    ("get", API + "jobs/{j}/logs/h.0/", None, 200),
    ("get", API + "jobs/{j}/checkpoints/", None, 200),
    ("get", API + "jobs/{j}/files/model.pt", None, 200),
    ("get", API + "jobs/{j}/files/step-4.pt", None, 200),
    ("get", WMLA + "execs/{j}", None, 200),
    ("get", WMLA + "execs/{j}/log", None, 200),
    ("get", WMLA + "execs/{j}/result", None, 200),
    ("post", API + "jobs/{j}/priority/", {"priority": 9000}, 200),
    ("delete", WMLA + "execs/{j}", None, 409),  # QUEUED: stop it first
    ("delete", API + "jobs/{j}/", None, 409),  # the same through the REST API
    ("post", API + "jobs/{j}/stop/", None, 200),
    ("post", WMLA + "execs/{j}/stop", None, 200),
    ("put", WMLA + "execs/{j}?action=stop", None, 200),
    ("delete", WMLA + "execs/{j}", None, 200),
    ("delete", API + "datasets/{d}/", None, 204),
    ("delete", API + "models/{m}/", None, 204),
]
LISTS = [
    "auth/me/",
    "datasets/",
    "models/",
    "jobs/",
    "cluster/slots/",
    "cluster/allocations/",
    "cluster/queue/",
    "cluster/decisions/",
]


def send(client: APIClient, method: str, url: str, body: Any) -> Any:
    if isinstance(body, bytes):
        return getattr(client, method)(
            url,
            body,
            content_type="application/octet-stream",
            HTTP_CONTENT_RANGE=f"bytes 0-{len(body) - 1}/9",
        )
    return getattr(client, method)(url, body, format="json")


# Owner scoping and authentication -------------------------------------------------------


def test_another_users_token_gets_404_on_every_one_of_my_objects(
    objects: dict[str, Any], bob: Any
) -> None:
    bob_client = token_client(bob)
    answers = {}
    for method, path, body, _ in OWNED:
        reply = send(bob_client, method, path.format(**objects), body)
        answers[f"{method} {path}"] = (reply.status_code, "not yours" in reply.json()["error"])
    assert {call: a for call, a in answers.items() if a != (404, True)} == {}
    job = Job.objects.get(pk=objects["j"])
    assert (job.priority, job.state) == (5000, Job.State.QUEUED)
    assert not job.events.filter(kind__in=["priority", "stopped"]).exists()
    assert Dataset.objects.filter(pk=objects["d"]).exists()
    assert ModelDefinition.objects.filter(pk=objects["m"]).exists()
    for path in LISTS[1:4]:
        assert bob_client.get(API + path).json()["results"] == []
    assert bob_client.get(WMLA + "execs").json() == []


def test_the_owner_reaches_every_one_of_them(objects: dict[str, Any], alice: Any) -> None:
    client = token_client(alice)
    answers = {
        f"{method} {path}": send(client, method, path.format(**objects), body).status_code
        for method, path, body, _ in OWNED
    }
    assert answers == {f"{method} {path}": code for method, path, _, code in OWNED}
    assert not Job.objects.exists() and not Dataset.objects.exists()


def test_staff_see_everyones_objects(objects: dict[str, Any], django_user_model: Any) -> None:
    admin = django_user_model.objects.create_user("root", password="x", is_staff=True)
    staff = token_client(admin)
    assert staff.get(f"{API}jobs/{objects['j']}/").status_code == 200
    assert [d["name"] for d in staff.get(API + "datasets/").json()["results"]] == ["shapes"]


def test_no_token_gets_401_with_a_hint_everywhere(objects: dict[str, Any]) -> None:
    calls = [(m, p, b) for m, p, b, _ in OWNED] + [("get", API + p, None) for p in LISTS]
    calls += [
        ("post", API + "jobs/", {"model": 1, "dataset": 1}),
        ("post", API + "datasets/uploads/", {"name": "x", "size": 1}),
        ("get", WMLA + "execs", None),
        ("get", WMLA + "execs/frameworks", None),
    ]
    anonymous = token_client()
    answers = {}
    for method, path, body in calls:
        reply = send(anonymous, method, path.format(**objects), body)
        scheme = reply.headers.get("WWW-Authenticate")
        answers[f"{method} {path}"] = (
            reply.status_code,
            scheme,
            "edt login" in reply.json()["error"],
        )
    wrong = {
        call: answer
        for call, answer in answers.items()
        if answer != (401, 'Basic realm="api"' if WMLA in call else "Token", True)
    }
    assert wrong == {}
    assert Job.objects.get(pk=objects["j"]).state == Job.State.QUEUED


def test_a_revoked_or_made_up_token_gets_401(alice: Any) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef")
    reply = client.get(API + "jobs/")
    assert reply.status_code == 401 and "log in again" in reply.json()["error"]


def test_a_token_comes_from_the_password_and_can_be_revoked(alice: Any) -> None:
    client = APIClient()
    wrong = client.post(API + "auth/token/", {"username": "alice", "password": "nope"})
    assert wrong.status_code == 400 and "wrong username or password" in wrong.json()["error"]
    token = client.post(API + "auth/token/", {"username": "alice", "password": "alice-pass-1"})
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.json()['token']}")
    assert client.get(API + "auth/me/").json() == {"username": "alice", "is_staff": False}
    assert client.delete(API + "auth/token/").status_code == 204
    assert client.get(API + "auth/me/").status_code == 401


def test_session_login_works_too(client: Any, objects: dict[str, Any], alice: Any) -> None:
    client.force_login(alice)
    assert client.get(f"{API}jobs/{objects['j']}/").json()["name"] == "mlp on shapes"


# Errors that name what to fix -------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_workers": "many"}, "max_workers"),
        ({"max_workers": 0}, "max_workers"),
        ({"priority": 10001}, "priority"),
        ({"min_workers": 3, "max_workers": 2}, "min_workers"),
        ({"batch_size": 1000}, "batch_size"),  # more than the 256 training samples
        ({"epochs": None}, "epochs"),
        ({"model": 999999}, "model"),
        ({"dataset": "shapes"}, "dataset"),
    ],
)
def test_a_malformed_submission_is_a_400_naming_the_field(
    objects: dict[str, Any], alice: Any, changes: dict[str, Any], field: str
) -> None:
    body = {"model": objects["m"], "dataset": objects["d"], "max_workers": 2, **changes}
    reply = token_client(alice).post(API + "jobs/", body, format="json")
    assert reply.status_code == 400, reply.content
    assert field in reply.json()["fields"], reply.json()
    assert reply.json()["error"].startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("post", "jobs/{j}/priority/", {"priority": "high"}, "priority"),
        ("post", "jobs/{j}/priority/", {}, "priority"),
        ("get", "jobs/{j}/priority/preview/?priority=0", None, "priority"),
        ("get", "jobs/{j}/logs/h.0/?offset=end", None, "offset"),
        ("get", "jobs/{j}/metrics/?points=0", None, "points"),
        ("post", "datasets/uploads/", {"name": "big", "size": "huge"}, "size"),
        ("post", "datasets/uploads/", {"size": 10}, "name"),
        ("post", "auth/token/", {"username": "alice"}, "password"),
    ],
)
def test_malformed_requests_are_400s_naming_the_field(
    objects: dict[str, Any], alice: Any, method: str, path: str, body: Any, field: str
) -> None:
    reply = send(token_client(alice), method, API + path.format(**objects), body)
    assert reply.status_code == 400, reply.content
    assert field in reply.json()["fields"]


def test_a_body_that_is_not_json_is_a_400_that_says_so(alice: Any) -> None:
    reply = token_client(alice).post(API + "jobs/", "{nope", content_type="application/json")
    assert reply.status_code == 400 and "JSON parse error" in reply.json()["error"]


def test_unknown_api_paths_are_json_404s(alice: Any) -> None:
    reply = token_client(alice).get(API + "no/such/thing")
    assert reply.status_code == 404 and "/api/v1/docs/" in reply.json()["error"]


# Jobs -----------------------------------------------------------------------------------


def test_submit_list_show_reprioritise_and_stop(objects: dict[str, Any], alice: Any) -> None:
    client = token_client(alice)
    body = {"model": objects["m"], "dataset": objects["d"], "max_workers": 2, "epochs": 3}
    job = client.post(API + "jobs/", body, format="json").json()
    assert (job["state"], job["max_workers"], job["workers"]) == ("QUEUED", 2, 0)
    assert job["total_steps"] == 3 * (256 // 64)
    listed = client.get(API + "jobs/", {"state": "queued"}).json()
    assert {j["id"] for j in listed["results"]} == {job["id"], objects["j"]}
    moved = client.post(f"{API}jobs/{job['id']}/priority/", {"priority": 10000}, format="json")
    assert moved.json()["priority"] == 10000
    events = client.get(f"{API}jobs/{job['id']}/events/").json()
    assert [e["kind"] for e in events] == ["submitted", "priority"]
    assert events[1]["data"] == {"old": 5000, "new": 10000}
    queue = client.get(API + "cluster/queue/").json()
    # No scheduler decided yet: no place, the higher priority first, and no word of its own.
    assert [(q["id"], q["position"]) for q in queue] == [(job["id"], 0), (objects["j"], 0)]
    assert {q["reason"] for q in queue} == {"waits for the scheduler's next decision"}
    assert client.post(f"{API}jobs/{job['id']}/stop/").json()["state"] == "STOPPED"
    again = client.post(f"{API}jobs/{job['id']}/stop/")
    assert again.status_code == 409 and "already ended (STOPPED)" in again.json()["error"]


def test_a_job_trains_in_the_precision_it_asks_for(objects: dict[str, Any], alice: Any) -> None:
    client = token_client(alice)
    body = {"model": objects["m"], "dataset": objects["d"], "precision": "bf16"}
    job = client.post(API + "jobs/", body, format="json").json()
    assert job["precision"] == "bf16"
    assert JobSpec.load(Job.objects.get(pk=job["id"]).spec_path).precision == "bf16"
    bad = client.post(API + "jobs/", {**body, "precision": "fp8"}, format="json")
    assert bad.status_code == 400 and "precision" in bad.json()["fields"]
    plain = client.post(API + "jobs/", {k: body[k] for k in ("model", "dataset")}, format="json")
    assert plain.json()["precision"] == "fp32"


def test_a_submission_must_name_a_checked_model(objects: dict[str, Any], alice: Any) -> None:
    ModelDefinition.objects.filter(pk=objects["m"]).update(
        status=ModelDefinition.Status.INVALID, error="NameError: nn"
    )
    body = {"model": objects["m"], "dataset": objects["d"], "max_workers": 1}
    reply = token_client(alice).post(API + "jobs/", body, format="json")
    assert reply.status_code == 400
    assert reply.json()["fields"]["model"] == [
        f"model {objects['m']} is INVALID, not VALID: NameError: nn"
    ]


def test_logs_read_on_from_an_offset(objects: dict[str, Any], alice: Any) -> None:
    client = token_client(alice)
    assert client.get(f"{API}jobs/{objects['j']}/logs/").json() == [{"slot": "h.0", "size": 25}]
    first = client.get(f"{API}jobs/{objects['j']}/logs/h.0/", {"limit": 8}).json()
    rest = client.get(f"{API}jobs/{objects['j']}/logs/h.0/", {"offset": first["offset"]}).json()
    assert first["text"] + rest["text"] == "epoch 0 step 0 loss 2.30\n"
    assert client.get(f"{API}jobs/{objects['j']}/logs/h.9/").status_code == 404


def test_metrics_come_downsampled_or_paged(objects: dict[str, Any], alice: Any) -> None:
    records = [
        {"type": "train", "step": i, "epoch": 0, "time": 1.0 + i, "loss": 2.0 - i / 100}
        for i in range(50)
    ]
    services.persist_metrics(
        objects["j"],
        [*records, {"type": "test", "step": 49, "epoch": 0, "time": 60.0, "loss": 1.5}],
    )
    client = token_client(alice)
    history = client.get(f"{API}jobs/{objects['j']}/metrics/", {"points": 10}).json()
    assert history["total"] == 50 and 10 <= len(history["train"]) <= 11
    assert history["train"][-1]["step"] == 49 and len(history["test"]) == 1
    page = client.get(
        f"{API}jobs/{objects['j']}/metrics/records/", {"kind": "train", "limit": 20, "offset": 40}
    ).json()
    assert page["count"] == 50 and [r["step"] for r in page["results"]] == list(range(40, 50))


def test_the_final_model_and_checkpoints_download(objects: dict[str, Any], alice: Any) -> None:
    client = token_client(alice)
    files = client.get(f"{API}jobs/{objects['j']}/checkpoints/").json()
    assert [f["name"] for f in files] == ["step-4.pt", "model.pt"]
    reply = client.get(f"{API}jobs/{objects['j']}/files/model.pt")
    assert b"".join(reply.streaming_content) == b"final model"
    assert f'filename="job{objects["j"]}-model.pt"' in reply.headers["Content-Disposition"]
    missing = client.get(f"{API}jobs/{objects['j']}/files/step-9.pt")
    assert missing.status_code == 404 and "has no file 'step-9.pt'" in missing.json()["error"]


# Uploads ----------------------------------------------------------------------------------


def test_a_chunked_upload_resumes_from_where_the_server_says(alice: Any) -> None:
    client = token_client(alice)
    start = client.post(API + "datasets/uploads/", {"name": "d", "size": 10}, format="json")
    assert start.status_code == 201
    url = f"{API}datasets/uploads/{start.json()['id']}/"
    head = b"PK\x03\x04x"  # a zip's first bytes: an upload's first chunk is checked
    put = client.put(
        url, head, content_type="application/octet-stream", HTTP_CONTENT_RANGE="bytes 0-4/10"
    )
    assert put.json()["received"] == 5
    resent = client.put(
        url, head, content_type="application/octet-stream", HTTP_CONTENT_RANGE="bytes 0-4/10"
    )
    assert resent.status_code == 409 and resent.json()["offset"] == 5
    assert client.get(url).json()["received"] == 5
    early = client.post(url + "complete/")
    assert early.status_code == 409 and "only 5 of 10 bytes arrived" in early.json()["error"]
    unranged = client.put(url, b"56789", content_type="application/octet-stream")
    assert unranged.status_code == 400 and "Content-Range" in unranged.json()["error"]


def test_an_upload_announced_over_the_limit_is_refused_before_any_byte(
    alice: Any, settings: Any
) -> None:
    settings.EDT_MAX_UPLOAD_BYTES = 1000
    reply = token_client(alice).post(API + "datasets/uploads/", {"name": "big", "size": 1001})
    assert reply.status_code == 413 and "limited to 1,000 bytes" in reply.json()["error"]
    assert not Dataset.objects.exists()


def test_bytes_past_the_announced_size_are_refused(alice: Any) -> None:
    client = token_client(alice)
    pk = client.post(API + "datasets/uploads/", {"name": "d", "size": 4}).json()["id"]
    reply = client.put(
        f"{API}datasets/uploads/{pk}/",
        b"123456",
        HTTP_CONTENT_RANGE="bytes 0-5/4",
        content_type="application/octet-stream",
    )
    assert reply.status_code == 413


class CountingReader(io.BytesIO):
    """A request body that counts what the server read of it."""

    consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.consumed += len(data)
        return data


def post_multipart(alice: Any, file_bytes: bytes, announced: int | None = None) -> Any:
    upload = SimpleUploadedFile("big.tar.gz", file_bytes)
    body = encode_multipart(BOUNDARY, {"name": "big", "file": upload})
    token = Token.objects.get_or_create(user=alice)[0].key
    request = RequestFactory().generic(
        "POST", API + "datasets/", body, MULTIPART_CONTENT, HTTP_AUTHORIZATION=f"Token {token}"
    )
    reader = CountingReader(body)
    length = announced or len(body)
    request.META["CONTENT_LENGTH"] = str(length)
    request._stream = LimitedStream(reader, length)
    return dataset_views.DatasetList.as_view()(request), reader, len(body)


def test_a_multipart_upload_is_cut_off_once_past_the_limit(alice: Any, settings: Any) -> None:
    settings.EDT_MAX_UPLOAD_BYTES = 256 * 1024
    reply, reader, total = post_multipart(alice, b"\0" * (4 << 20))
    assert reply.status_code == 413, reply.data
    assert "larger than the 262,144 bytes" in reply.data["error"]
    assert reader.consumed < 512 * 1024 < total  # stopped reading soon after the limit
    assert not Dataset.objects.exists()


def test_a_multipart_upload_announced_too_large_is_not_read_at_all(
    alice: Any, settings: Any
) -> None:
    settings.EDT_MAX_UPLOAD_BYTES = 256 * 1024
    reply, reader, _ = post_multipart(alice, b"small", announced=10 << 30)
    assert reply.status_code == 413 and reader.consumed == 0


@pytest.mark.django_db(transaction=True)
def test_a_small_archive_in_one_multipart_post_becomes_ready(
    alice: Any, control_worker: Any, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(write_cifar10(tmp_path, train=100, test=20), arcname="cifar-10-batches-py")
    upload = SimpleUploadedFile("tiny.tar.gz", buffer.getvalue())
    client = token_client(alice)
    reply = client.post(API + "datasets/", {"name": "tiny", "file": upload}, format="multipart")
    assert reply.status_code == 201, reply.content
    url = f"{API}datasets/{reply.json()['id']}/"
    ready = wait_for(lambda: client.get(url).json()["status"] in ("READY", "FAILED"), 60, "prep")
    dataset = client.get(url).json()
    assert ready and dataset["status"] == "READY", dataset["error"]
    assert dataset["format"] == "cifar10" and len(dataset["thumbnails"]) == 40
    thumb = client.get(dataset["thumbnails"][0]["url"])
    assert thumb.status_code == 200 and thumb["Content-Type"] == "image/png"


def test_a_multipart_post_without_a_file_names_the_field(alice: Any) -> None:
    reply = token_client(alice).post(API + "datasets/", {"name": "x"}, format="multipart")
    assert reply.status_code == 400 and "file" in reply.json()["fields"]


# Models -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the check runs on the control worker
def test_a_broken_model_upload_reports_its_error_line(alice: Any, control_worker: Any) -> None:
    client = token_client(alice)
    source = b"import torch\n\ndef build_model():\n    return torch.nn.Linear(3, 10\n"
    upload = SimpleUploadedFile("broken.py", source)
    model = client.post(API + "models/", {"file": upload}, format="multipart").json()
    assert model["name"] == "broken"
    model = wait_for(lambda: poll_model(client, model["id"]), 60, "the model check")
    assert model["status"] == "INVALID" and 'File "broken.py", line 4' in model["error_line"]
    assert client.get(f"{API}models/{model['id']}/source/").json()["source"] == source.decode()


def poll_model(client: APIClient, pk: int) -> Any:
    model = client.get(f"{API}models/{pk}/").json()
    return model if model["status"] != "CHECKING" else None


@pytest.mark.django_db(transaction=True)
def test_an_archive_without_its_entry_module_is_a_400(alice: Any) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = b"x = 1\n"
        info = tarfile.TarInfo("pkg/helper.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    upload = SimpleUploadedFile("m.tar", buffer.getvalue())
    reply = token_client(alice).post(
        API + "models/", {"file": upload, "entry": "main.py"}, format="multipart"
    )
    assert reply.status_code == 400 and "pkg/helper.py" in reply.json()["error"]


def test_errors_are_always_json_with_an_error_key(alice: Any) -> None:
    for reply in (
        token_client(alice).patch(API + "jobs/"),
        token_client(alice).get(API + "jobs/999999/"),
        token_client().get(API + "jobs/"),
    ):
        assert reply["Content-Type"] == "application/json"
        assert set(json.loads(reply.content)) <= {"error", "fields"}


def test_a_missing_trailing_slash_gets_a_hint(alice: Any) -> None:
    reply = token_client(alice).get(API + "jobs")
    assert reply.status_code == 404 and "did you mean /api/v1/jobs/ ?" in reply.json()["error"]


def test_an_unknown_state_filter_is_a_400(alice: Any) -> None:
    reply = token_client(alice).get(API + "jobs/", {"state": "sleeping"})
    assert reply.status_code == 400 and "QUEUED" in reply.json()["fields"]["state"][0]


# Deleting a job ---------------------------------------------------------------------------


def test_an_ended_job_is_deleted_with_its_records_files_and_live_state(
    objects: dict[str, Any], alice: Any
) -> None:
    client, pk = token_client(alice), objects["j"]
    job = Job.objects.get(pk=pk)
    record = {"type": "train", "step": 0, "time": 1.0, "loss": 2.3, "workers": 1}
    services.persist_metrics(pk, [record], publish=False)
    store = services.job_store(pk)
    store.record_checkpoint(4)
    assert list(store.r.scan_iter(match=f"edt:job:{pk}:*"))
    active = client.delete(f"{API}jobs/{pk}/")
    assert active.status_code == 409 and "stop it first" in active.json()["error"]
    assert job.workdir.is_dir()

    assert client.post(f"{API}jobs/{pk}/stop/").status_code == 200
    assert client.delete(f"{API}jobs/{pk}/").status_code == 204
    assert not Job.objects.filter(pk=pk).exists()
    assert not JobEvent.objects.filter(job_id=pk).exists()
    assert not Metric.objects.filter(job_id=pk).exists()
    assert not job.workdir.exists()
    assert list(store.r.scan_iter(match=f"edt:job:{pk}:*")) == []
    assert client.delete(f"{API}jobs/{pk}/").status_code == 404
    assert Dataset.objects.filter(pk=objects["d"]).exists()  # what it used stays
    assert ModelDefinition.objects.filter(pk=objects["m"]).exists()
