from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from edtweb import jsonbounds
from edtweb.datasets import services
from edtweb.datasets.models import Dataset
from edtweb.ownership import get_owned, owned

RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


@login_required
def dataset_list(request: HttpRequest) -> HttpResponse:
    return _list_page(request)


def _list_page(request: HttpRequest, refused: str = "", status: int = 200) -> HttpResponse:
    from edtweb.datasets.roots import roots

    context = {
        "datasets": owned(request, Dataset), "nav": "datasets",
        "max_bytes": services.max_upload_bytes(), "roots": roots(), "refused": refused,
        "asked": {k: request.POST.get(k, "") for k in ("name", "path")},
    }  # fmt: skip
    return render(request, "datasets/list.html", context, status=status)


@login_required
@require_POST
def dataset_register(request: HttpRequest) -> HttpResponse:
    """The page's form for a dataset in place (the API's ``datasets/register/``)."""
    try:
        dataset = services.register_in_place(
            request.user, request.POST.get("name", ""), request.POST.get("path", "")
        )
    except services.UploadError as exc:
        return _list_page(request, str(exc), exc.status)
    return redirect("dataset", dataset.pk)


@login_required
def dataset_detail(request: HttpRequest, pk: int) -> HttpResponse:
    dataset = get_owned(request, Dataset, pk)
    context = {"dataset": dataset, "thumbs": services.thumbnails(dataset), "nav": "datasets"}
    return render(request, "datasets/detail.html", context)


def state(dataset: Dataset, **extra: Any) -> JsonResponse:
    return JsonResponse(
        {
            "id": dataset.pk,
            "status": dataset.status,
            "offset": dataset.received,
            "size": dataset.size,
            "progress": dataset.progress,
            "error": dataset.error,
            "url": f"/datasets/{dataset.pk}/",
            **extra,
        }
    )


def refuse(exc: services.UploadError) -> JsonResponse:
    body: dict[str, Any] = {"error": str(exc)}
    if exc.offset is not None:
        body["offset"] = exc.offset
    return JsonResponse(body, status=exc.status)


@login_required
@require_POST
def upload_start(request: HttpRequest) -> JsonResponse:
    try:
        body = jsonbounds.loads(request.body or b"{}")
        size = int(body.get("size", 0))
        dataset = services.start_upload(
            request.user, str(body.get("name", "")), str(body.get("filename", "")), size
        )
    except (ValueError, TypeError) as exc:
        if isinstance(exc, services.UploadError):
            return refuse(exc)
        return JsonResponse({"error": f"malformed request: {exc}"}, status=400)
    return state(dataset)


@login_required
@require_http_methods(["GET", "PUT"])
def upload_chunk(request: HttpRequest, pk: int) -> JsonResponse:
    dataset = get_owned(request, Dataset, pk)
    if request.method == "GET":
        return state(dataset)
    match = RANGE.fullmatch(request.headers.get("Content-Range", ""))
    if not match:
        return JsonResponse(
            {"error": "send a Content-Range: bytes START-END/TOTAL header"}, status=400
        )
    try:
        offset = services.append_chunk(dataset, int(match.group(1)), request.body)
    except services.UploadError as exc:
        return refuse(exc)
    dataset.received = offset
    return state(dataset)


@login_required
@require_POST
def upload_finish(request: HttpRequest, pk: int) -> JsonResponse:
    dataset = get_owned(request, Dataset, pk)
    try:
        services.finish_upload(dataset)
    except services.UploadError as exc:
        return refuse(exc)
    dataset.refresh_from_db()
    return state(dataset)


@login_required
@require_GET
def dataset_status(request: HttpRequest, pk: int) -> JsonResponse:
    return state(get_owned(request, Dataset, pk))


@login_required
@require_GET
def thumbnail(request: HttpRequest, pk: int, name: str) -> FileResponse:
    dataset = get_owned(request, Dataset, pk)
    path = dataset.thumbs_dir / name
    if "/" in name or not path.is_file():
        raise Http404("no such thumbnail")
    return FileResponse(path.open("rb"), content_type="image/png")


@login_required
@require_POST
def dataset_delete(request: HttpRequest, pk: int) -> HttpResponse:
    services.delete(get_owned(request, Dataset, pk))
    return redirect("datasets")
