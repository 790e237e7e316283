"""Datasets registered in place under a data root (docs/architecture.md, "Datasets in
place"): paths judged before anything reads them, the roots' rule of who may register,
a check from a sample with nothing copied, the page's form and WMLA's ``data_path``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from PIL import Image
from playwright.sync_api import expect

from edtweb.api.errors import ApiError
from edtweb.api.wmla import _dataset_at
from edtweb.datasets.models import Dataset
from edtweb.tenancy.models import Membership, ResourceGroup, Team
from tests.browser import browser_page, log_in
from tests.harness.api import token_client
from tests.harness.pages import violations
from tests.harness.stack import LiveEdt
from tests.harness.waiting import wait_for
from workers.dataroots import DataRoot, PathRefused, parse, resolve
from workers.learner.datasets import write_imagefolder

API = "/api/v1/"


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    """Two roots (the second for the team ``vision`` alone), a folder outside both, and
    links: one inside the first root, one from it to the outside."""
    shared, vision, outside = (tmp_path / n for n in ("shared", "vision", "outside"))
    for folder in (shared, vision, outside):
        folder.mkdir()
    (shared / "flowers").mkdir()
    (outside / "secret").mkdir()
    os.symlink(shared / "flowers", shared / "also-flowers")
    os.symlink(outside / "secret", shared / "escape")
    return {"shared": shared, "vision": vision, "outside": outside}


def test_roots_parse_with_their_teams() -> None:
    assert parse(" /a , /b=vision|nlp ,") == [
        DataRoot(Path("/a")), DataRoot(Path("/b"), ("vision", "nlp"))]  # fmt: skip
    with pytest.raises(ValueError, match="'data' is not an absolute path"):
        parse("data")


@pytest.mark.parametrize("given, why", [
    ("{shared}/flowers", None),
    ("flowers", None),  # relative to a root, as WMLA's data_path
    ("{shared}/also-flowers", None),  # a link that stays inside its root
    ("{shared}/../outside/secret", "a path with '..' is refused"),
    ("flowers/../../outside", "a path with '..' is refused"),
    ("{outside}/secret", "is under no data root"),
    ("{shared}/escape", "leads out of the data root .* through a link"),
    ("{shared}/nothing-here", "no such file or folder"),
    ("", "give the dataset's path"),
])  # fmt: skip
def test_a_path_is_judged_before_anything_reads_it(
    roots: dict[str, Path], given: str, why: str | None
) -> None:
    configured = [DataRoot(roots["shared"]), DataRoot(roots["vision"], ("vision",))]
    for order in (configured, configured[::-1]):
        text = given.format(**roots)
        if why is None:
            root, path = resolve(text, order)
            assert (root.path, path) == (roots["shared"], roots["shared"] / "flowers")
        else:
            with pytest.raises(PathRefused, match=why):
                resolve(text, order)


@pytest.fixture
def configured(settings: Any, roots: dict[str, Path]) -> dict[str, Path]:
    settings.EDT_DATA_ROOTS = f"{roots['shared']},{roots['vision']}=vision"
    return roots


@pytest.mark.django_db(transaction=True)
def test_a_dataset_registered_by_path_is_checked_from_a_sample_and_never_copied(
    alice: Any, control_worker: Any, configured: dict[str, Path]
) -> None:
    images = write_imagefolder(configured["shared"] / "flowers", 60, 12, num_classes=3)
    Image.new("RGB", (300, 200)).save(images / "train" / "bird" / "big.jpg")  # any size
    client = token_client(alice)
    reply = client.post(API + "datasets/register/", {"name": "flowers", "path": "flowers"})
    assert reply.status_code == 201, reply.content
    url = f"{API}datasets/{reply.json()['id']}/"
    wait_for(lambda: client.get(url).json()["status"] in ("READY", "FAILED"), 60, "the check")
    dataset = client.get(url).json()
    assert dataset["status"] == "READY", dataset["error"]
    assert dataset["source"] == str(images) and dataset["format"] == "imagefolder"
    assert dataset["summary"]["splits"]["train"]["per_class"] == {
        "airplane": 20, "automobile": 20, "bird": 21}  # fmt: skip
    assert len(dataset["thumbnails"]) == 12
    row = Dataset.objects.get(pk=dataset["id"])
    kept = sorted(p.relative_to(row.root).as_posix() for p in row.root.rglob("*") if p.is_file())
    assert all(k.startswith("thumbs/") or k == "prepare.log" for k in kept), kept
    assert client.delete(url).status_code == 204
    assert (images / "train" / "bird" / "big.jpg").is_file()  # its files stay where they are


@pytest.mark.django_db
@pytest.mark.parametrize("given, status, why", [
    ("{shared}/../outside/secret", 400, "a path with '..' is refused"),
    ("{outside}/secret", 400, "is under no data root"),
    ("{shared}/escape", 400, "leads out of the data root"),
    ("{vision}", 403, "members of vision only"),
])  # fmt: skip
def test_a_path_outside_or_escaping_or_not_allowed_is_refused_with_a_message(
    alice: Any, configured: dict[str, Path], given: str, status: int, why: str
) -> None:
    reply = token_client(alice).post(
        API + "datasets/register/", {"name": "x", "path": given.format(**configured)}
    )
    assert reply.status_code == status and why in reply.json()["error"], reply.content
    assert not Dataset.objects.exists()


@pytest.mark.django_db
def test_a_roots_team_may_register_under_it(alice: Any, configured: dict[str, Path]) -> None:
    ResourceGroup.objects.default()  # a transactional test before may have emptied the table
    Membership.objects.create(user=alice, team=Team.objects.create(name="vision"))
    reply = token_client(alice).post(
        API + "datasets/register/", {"name": "v", "path": str(configured["vision"])}
    )
    assert reply.status_code == 201 and reply.json()["status"] == "PREPARING", reply.content


@pytest.mark.django_db
def test_the_datasets_page_registers_in_place_and_shows_a_refusal(
    alice: Any, configured: dict[str, Path]
) -> None:
    client = Client()
    client.force_login(alice)
    page = client.get("/datasets/").content.decode()
    assert "Register a dataset in place" in page and str(configured["shared"]) in page
    refused = client.post("/datasets/register", {"name": "x", "path": "../etc"})
    assert refused.status_code == 400
    assert "a path with &#x27;..&#x27; is refused" in refused.content.decode()
    made = client.post("/datasets/register", {"name": "flowers", "path": "flowers"})
    dataset = Dataset.objects.get(name="flowers")
    assert made.status_code == 302 and made["Location"] == f"/datasets/{dataset.pk}/"
    assert dataset.source == str(configured["shared"] / "flowers")


@pytest.mark.django_db
def test_wmla_data_path_resolves_under_the_roots(alice: Any, configured: dict[str, Path]) -> None:
    source = configured["shared"] / "flowers"
    mine = Dataset.objects.filter(owner=alice)
    ready = Dataset.objects.create(owner=alice, name="flowers", source=str(source),
                                   status=Dataset.Status.READY)  # fmt: skip
    assert _dataset_at(mine, str(source)) == ready
    assert _dataset_at(mine, "flowers") == ready
    assert _dataset_at(mine, "also-flowers") == ready  # a link inside the root
    with pytest.raises(ApiError, match="leads out of the data root"):
        _dataset_at(mine, "escape")
    with pytest.raises(ApiError, match=r"a path with '\.\.' is refused"):
        _dataset_at(mine, "flowers/../../outside/secret")
    ready.delete()
    with pytest.raises(ApiError, match="register it with `edt datasets add --path flowers"):
        _dataset_at(mine, "flowers")


@pytest.mark.browser
def test_a_folder_is_registered_in_place_from_the_datasets_page(live: LiveEdt) -> None:
    """On the run's live EDT, whose data root is ``roots/`` beside its data directory."""
    folder = write_imagefolder(live.tmp / "roots" / "flowers-page", 30, 9, num_classes=3)
    with browser_page() as page:
        log_in(page, live.url, live.data_dir)
        page.goto(live.url + "/datasets/")
        page.fill("#in-place-name", "flowers")
        page.fill("#in-place-path", "flowers-page/../..")
        page.click("#in-place button[type=submit]")
        expect(page.locator("#in-place-error")).to_contain_text("a path with '..' is refused")
        page.fill("#in-place-path", "flowers-page")
        page.click("#in-place button[type=submit]")
        expect(page.locator("#dataset-source")).to_contain_text(str(folder))
        expect(page.locator("#thumbs img")).to_have_count(12)
        assert violations(page) == []
