"""Datasets, models and jobs: uploads, hostile archives, broken models, owner scoping."""

from __future__ import annotations

import asyncio
import io
import json
import random
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from edtweb.asgi import application
from edtweb.datasets import services as datasets
from edtweb.datasets.models import Dataset
from edtweb.registry import services as registry
from edtweb.registry.models import ModelDefinition
from edtweb.training import services as jobs
from edtweb.training.models import Job
from tests.harness.processes import PROJECT_DIR
from workers.learner.datasets import write_cifar10

pytestmark = pytest.mark.django_db(transaction=True)


def tar_gz_of(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buffer.getvalue()


def upload(
    client: Client, name: str, content: bytes, upto: int, chunk: int = 1 << 16
) -> dict[str, Any]:
    """Announce all of ``content``, send its first ``upto`` bytes in chunks."""
    start = client.post(
        "/datasets/uploads",
        json.dumps({"name": name, "filename": f"{name}.tar.gz", "size": len(content)}),
        content_type="application/json",
    ).json()
    for offset in range(0, upto, chunk):
        part = content[offset : min(offset + chunk, upto)]
        header = f"bytes {offset}-{offset + len(part) - 1}/{len(content)}"
        reply = client.put(
            f"/datasets/uploads/{start['id']}",
            part,
            content_type="application/octet-stream",
            HTTP_CONTENT_RANGE=header,
        )
        assert reply.status_code == 200, reply.json()
    return dict(start)


def test_an_upload_in_chunks_resumes_and_becomes_a_ready_dataset(
    client: Client, alice: Any, tmp_path: Path
) -> None:
    client.force_login(alice)
    content = tar_gz_of(write_cifar10(tmp_path / "d", train=200, test=50))
    start = upload(client, "small", content, upto=len(content) // 2)
    # A resent (already received) chunk is refused with the offset to resume from.
    again = client.put(
        f"/datasets/uploads/{start['id']}",
        content[:10],
        content_type="application/octet-stream",
        HTTP_CONTENT_RANGE=f"bytes 0-9/{len(content)}",
    )
    assert again.status_code == 409 and again.json()["offset"] == len(content) // 2
    rest = content[len(content) // 2 :]
    header = f"bytes {len(content) // 2}-{len(content) - 1}/{len(content)}"
    reply = client.put(
        f"/datasets/uploads/{start['id']}",
        rest,
        content_type="application/octet-stream",
        HTTP_CONTENT_RANGE=header,
    )
    assert reply.json()["offset"] == len(content)
    dataset = Dataset.objects.get(pk=start["id"])
    Dataset.objects.filter(pk=dataset.pk).update(status=Dataset.Status.PREPARING)
    datasets.run_preparation(dataset.pk)  # what the control worker runs on completion
    dataset.refresh_from_db()
    assert dataset.status == Dataset.Status.READY and dataset.format == "cifar10"
    assert dataset.summary["splits"]["train"]["count"] == 200
    page = client.get(f"/datasets/{dataset.pk}/")
    assert page.content.count(b"<img src=") == 40  # 4 thumbnails for each of 10 classes


def test_an_upload_over_the_cap_is_refused_before_any_byte(
    client: Client, alice: Any, settings: Any
) -> None:
    settings.EDT_MAX_UPLOAD_BYTES = 1000
    client.force_login(alice)
    reply = client.post(
        "/datasets/uploads",
        json.dumps({"name": "big", "filename": "big.zip", "size": 5000}),
        content_type="application/json",
    )
    assert reply.status_code == 413 and "limited to 1,000 bytes" in reply.json()["error"]
    assert not Dataset.objects.exists()


def test_more_bytes_than_announced_are_refused_while_streaming(client: Client, alice: Any) -> None:
    client.force_login(alice)
    start = client.post(
        "/datasets/uploads",
        json.dumps({"name": "liar", "filename": "x.zip", "size": 10}),
        content_type="application/json",
    ).json()
    reply = client.put(
        f"/datasets/uploads/{start['id']}",
        b"x" * 20,
        content_type="application/octet-stream",
        HTTP_CONTENT_RANGE="bytes 0-19/10",
    )
    assert reply.status_code == 413


def zip_with(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, data)
    return buffer.getvalue()


HOSTILE = {
    "traversal": (zip_with("../evil.txt", b"x"), ".."),
    "absolute": (zip_with("/etc/evil.txt", b"x"), "absolute"),
    "bomb": (zip_with("zeros.bin", b"\0" * (64 << 20)), "compress"),
    "truncated": (zip_with("a.bin", random.Random(0).randbytes(100_000))[:3000], "truncated"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_fails_with_a_clear_message_and_leaves_nothing(
    case: str, alice: Any
) -> None:
    content, words = HOSTILE[case]
    dataset = datasets.start_upload(alice, case, f"{case}.zip", len(content))
    datasets.append_chunk(dataset, 0, content)
    dataset.refresh_from_db()
    datasets.prepare(dataset)
    dataset.refresh_from_db()
    assert dataset.status == Dataset.Status.FAILED
    assert words in dataset.error.lower(), dataset.error
    leftovers = [p for p in dataset.root.rglob("*") if p.is_file() and p.name != "prepare.log"]
    assert leftovers == []
    assert not (dataset.root.parent.parent / "evil.txt").exists()


def test_a_broken_model_file_shows_its_error_line(client: Client, alice: Any) -> None:
    client.force_login(alice)
    source = b"import torch\n\ndef build_model():\n    return torch.nn.Linear(3, 10\n"
    model = registry.create(alice, "broken", "broken.py", source, check_async=False)
    assert model.status == ModelDefinition.Status.INVALID
    page = client.get(f"/models/{model.pk}/").content.decode()
    assert "SyntaxError" in page or "was never closed" in page
    assert "File &quot;broken.py&quot;, line 4" in page


def test_a_model_being_checked_shows_how_long_its_check_has_run(client: Client, alice: Any) -> None:
    client.force_login(alice)
    model = ModelDefinition.objects.create(owner=alice, name="slow", entry="m.py")
    page = client.get(f"/models/{model.pk}/").content.decode()
    assert re.search(r"Checking: .* \d+ s of at most 60 s\.", page), page


def test_another_user_gets_404_for_my_dataset_model_and_job(
    client: Client, alice: Any, bob: Any, tmp_path: Path
) -> None:
    dataset = Dataset.objects.create(owner=alice, name="mine", status=Dataset.Status.READY)
    model = ModelDefinition.objects.create(owner=alice, name="mine", entry="m.py")
    job = jobs.submit_job(
        alice, name="mine", model_path=str(PROJECT_DIR / "examples/mlp.py"), data_path=str(tmp_path)
    )
    client.force_login(bob)
    for url in (
        f"/datasets/{dataset.pk}/",
        f"/models/{model.pk}/",
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/metrics",
        f"/datasets/{dataset.pk}/status",
    ):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/jobs/{job.pk}/priority", {"priority": 9000}).status_code == 404
    assert Job.objects.get(pk=job.pk).priority == 5000
    jobs.stop_job(job.pk)
    assert client.post(f"/jobs/{job.pk}/delete").status_code == 404
    assert Job.objects.filter(pk=job.pk).exists() and job.workdir.is_dir()
    assert b"mine" not in client.get("/jobs/").content


def test_another_user_is_refused_on_my_jobs_websocket(
    alice: Any, bob: Any, tmp_path: Path, redis_server: Any
) -> None:
    job = jobs.submit_job(
        alice, name="mine", model_path=str(PROJECT_DIR / "examples/mlp.py"), data_path=str(tmp_path)
    )

    def cookie(user: Any) -> bytes:
        c = Client()
        c.force_login(user)
        return f"sessionid={c.cookies['sessionid'].value}".encode()

    async def connects(user: Any) -> bool:
        headers = [
            (b"origin", b"http://127.0.0.1:8000"),
            (b"host", b"127.0.0.1:8000"),
            (b"cookie", cookie_of[user.username]),
        ]
        comm = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=headers)
        ok, _ = await comm.connect(timeout=5)
        await comm.disconnect()
        return bool(ok)

    cookie_of = {u.username: cookie(u) for u in (alice, bob)}
    assert asyncio.run(connects(alice)) is True
    assert asyncio.run(connects(bob)) is False


def test_the_job_page_deletes_an_ended_job_and_says_so(
    client: Client, alice: Any, tmp_path: Path, redis_server: Any
) -> None:
    client.force_login(alice)
    job = jobs.submit_job(
        alice,
        name="old run",
        model_path=str(PROJECT_DIR / "examples/mlp.py"),
        data_path=str(tmp_path),
    )
    assert 'id="delete-form" hidden' in client.get(f"/jobs/{job.pk}/").content.decode()
    refused = client.post(f"/jobs/{job.pk}/delete", follow=True).content.decode()
    assert f"Job {job.pk} is queued: stop it first." in refused
    assert Job.objects.filter(pk=job.pk).exists()

    jobs.stop_job(job.pk)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="stop-form" hidden' in page and 'id="delete-form" >' in page
    done = client.post(f"/jobs/{job.pk}/delete", follow=True)
    assert done.redirect_chain[-1][0] == "/jobs/"
    assert f"Job {job.pk} (old run) and its files were deleted." in done.content.decode()
    assert not Job.objects.filter(pk=job.pk).exists() and not job.workdir.exists()
    assert client.get(f"/jobs/{job.pk}/").status_code == 404


def test_the_train_form_starts_on_my_newest_usable_model_and_dataset(
    client: Client, alice: Any, bob: Any
) -> None:
    ready, valid = Dataset.Status.READY, ModelDefinition.Status.VALID
    Dataset.objects.create(owner=alice, name="older", status=ready)
    newest = Dataset.objects.create(owner=alice, name="newer", status=ready)
    Dataset.objects.create(owner=alice, name="still uploading", status=Dataset.Status.UPLOADING)
    Dataset.objects.create(owner=bob, name="bob's", status=ready)
    model = ModelDefinition.objects.create(owner=alice, name="mine", entry="m.py", status=valid)
    ModelDefinition.objects.create(owner=alice, name="broken", entry="b.py")
    client.force_login(alice)
    form = client.get("/train/").context["form"]
    assert (form["dataset"].value(), form["model"].value()) == (newest.pk, model.pk)
    other = Dataset.objects.get(name="older").pk
    assert client.get(f"/train/?dataset={other}").context["form"]["dataset"].value() == str(other)
    client.force_login(bob)
    assert client.get("/train/").context["form"]["model"].value() is None


def test_a_wrong_file_is_refused_on_its_first_chunk_under_its_own_name(
    client: Client, alice: Any
) -> None:
    client.force_login(alice)
    content = b"%PDF-1.7 this is a paper, not a dataset\n" * 1000
    start = client.post(
        "/datasets/uploads",
        json.dumps({"name": "paper", "filename": "paper.pdf", "size": len(content)}),
        content_type="application/json",
    ).json()
    reply = client.put(
        f"/datasets/uploads/{start['id']}",
        content[:65536],
        content_type="application/octet-stream",
        HTTP_CONTENT_RANGE=f"bytes 0-65535/{len(content)}",
    )
    assert reply.status_code == 415
    assert reply.json()["error"].startswith("paper.pdf is not a zip, tar or tar.gz archive")
    assert Dataset.objects.get(pk=start["id"]).received == 0
