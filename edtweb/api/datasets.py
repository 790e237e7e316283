"""Datasets over the API: list, detail, delete, thumbnails, and two ways to upload.

Large archives go in resumable chunks (the pages' protocol): announce the size (refused at
once, before any byte, when it is over ``EDT_MAX_UPLOAD_BYTES``), PUT chunks with a
``Content-Range`` header, then complete. Small ones may come in one multipart POST, read
with the same limit and cut off as soon as it is passed.
"""

from __future__ import annotations

import re
from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb.api import serializers as s
from edtweb.api.common import CappedUploadView, Owned, Pages, scoped
from edtweb.api.errors import ApiError
from edtweb.datasets import services
from edtweb.datasets.models import Dataset

TAGS = ["datasets"]
RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
COPY_CHUNK = 4 * 1024 * 1024
MAX_CHUNK_BYTES = 16 * 1024 * 1024  # DATA_UPLOAD_MAX_MEMORY_SIZE: one chunk fits in memory
ERRORS = {400: s.problem("malformed request; `fields` names the field")}


class DatasetList(CappedUploadView, generics.ListAPIView):
    serializer_class = s.DatasetSerializer
    pagination_class = Pages
    parser_classes = [MultiPartParser]

    def get_queryset(self) -> Any:
        return scoped(self.request, Dataset).select_related("owner")

    def upload_limit(self) -> int:
        return services.max_upload_bytes()

    @extend_schema(
        tags=TAGS,
        request={"multipart/form-data": s.DatasetUploadSerializer},
        responses={201: s.DatasetSerializer, **ERRORS, 413: s.problem("too big")},
    )
    def post(self, request: Request) -> Response:
        """Upload a whole archive in one request; it is then prepared in the background
        (status PREPARING, then READY or FAILED with the reason)."""
        data, upload = self.uploaded_file()
        form = s.DatasetUploadSerializer(data={"name": data.get("name", ""), "file": upload})
        form.is_valid(raise_exception=True)
        name = form.validated_data.get("name") or upload.name.split(".")[0]
        dataset = services.start_upload(request.user, name, upload.name, upload.size)
        try:
            upload.seek(0)
            while chunk := upload.read(COPY_CHUNK):
                dataset.received = services.append_chunk(dataset, dataset.received, chunk)
            services.finish_upload(dataset)
        except Exception:
            services.delete(dataset)
            raise
        dataset.refresh_from_db()
        return Response(s.DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)

    @extend_schema(tags=TAGS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Your datasets, newest first (staff: everyone's)."""
        return super().get(request, *args, **kwargs)


@extend_schema(tags=TAGS)
class DatasetDetail(Owned, generics.RetrieveDestroyAPIView):
    """A dataset: status, format, counts per split and class, thumbnails."""

    model = Dataset
    noun = "dataset"
    serializer_class = s.DatasetSerializer

    def perform_destroy(self, instance: Dataset) -> None:
        services.delete(instance)

    def delete(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Delete the dataset and its files (jobs that used it keep their records)."""
        return super().delete(request, *args, **kwargs)


class DatasetThumbnail(Owned, generics.GenericAPIView):
    model = Dataset
    noun = "dataset"

    @extend_schema(
        tags=TAGS,
        responses={(200, "image/png"): OpenApiTypes.BINARY, 404: s.problem("no such image")},
    )
    def get(self, request: Request, pk: int, name: str) -> FileResponse:
        """One sample thumbnail (PNG), as listed in the dataset's ``thumbnails``."""
        dataset = self.get_object()
        path = dataset.thumbs_dir / name
        if "/" in name or not path.is_file():
            raise ApiError(f"dataset {pk} has no thumbnail {name!r}", 404)
        return FileResponse(path.open("rb"), content_type="image/png")


class DatasetRegister(generics.GenericAPIView):
    serializer_class = s.DatasetRegisterSerializer

    @extend_schema(
        tags=TAGS,
        responses={
            201: s.DatasetSerializer,
            **ERRORS,
            403: s.problem("the data root's rule leaves you out"),
        },
    )
    def post(self, request: Request) -> Response:
        """Register a dataset in place, under a data root: nothing is copied. It is checked
        from a sample in the background (status PREPARING, then READY or FAILED). A path
        under no root, with '..', or leading out of its root through a link is a 400."""
        form = self.get_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        dataset = services.register_in_place(request.user, data["name"], data["path"])
        return Response(s.DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


class UploadStart(generics.GenericAPIView):
    serializer_class = s.UploadStartSerializer

    @extend_schema(
        tags=TAGS,
        responses={201: s.UploadStateSerializer, **ERRORS, 413: s.problem("over the limit")},
    )
    def post(self, request: Request) -> Response:
        """Start a chunked upload: name the dataset and announce the archive's size. An
        archive over the limit is refused here (413), before any byte is sent."""
        form = self.get_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        dataset = services.start_upload(request.user, data["name"], data["filename"], data["size"])
        return Response(upload_state(dataset), status=status.HTTP_201_CREATED)


class UploadChunk(Owned, generics.GenericAPIView):
    model = Dataset
    noun = "upload"

    @extend_schema(tags=TAGS, responses={200: s.UploadStateSerializer})
    def get(self, request: Request, pk: int) -> Response:
        """Where the upload stands: resume by sending bytes from ``received``."""
        return Response(upload_state(self.get_object()))

    @extend_schema(
        tags=TAGS,
        request={"application/octet-stream": OpenApiTypes.BINARY},
        parameters=[
            OpenApiParameter(
                "Content-Range",
                str,
                OpenApiParameter.HEADER,
                required=True,
                description="bytes START-END/TOTAL; START must equal `received`",
            )
        ],
        responses={
            200: s.UploadStateSerializer,
            400: s.problem("no Content-Range"),
            409: s.problem("out of order: `offset` says where to resume"),
            413: s.problem("past the announced size, or chunk too big"),
        },
    )
    def put(self, request: Request, pk: int) -> Response:
        """Append one chunk (at most 16 MiB; 4 MiB is a good size) at byte START."""
        dataset = self.get_object()
        match = RANGE.fullmatch(request.headers.get("Content-Range", ""))
        if not match:
            raise ApiError("Content-Range: send a 'bytes START-END/TOTAL' header", 400)
        if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_CHUNK_BYTES:
            raise ApiError(f"chunks are limited to {MAX_CHUNK_BYTES:,} bytes; send smaller", 413)
        dataset.received = services.append_chunk(dataset, int(match.group(1)), request.body)
        return Response(upload_state(dataset))


class UploadComplete(Owned, generics.GenericAPIView):
    model = Dataset
    noun = "upload"

    @extend_schema(
        tags=TAGS,
        request=None,
        responses={200: s.DatasetSerializer, 409: s.problem("bytes missing")},
    )
    def post(self, request: Request, pk: int) -> Response:
        """All bytes are in: prepare the dataset (status PREPARING, then READY or FAILED)."""
        dataset = self.get_object()
        services.finish_upload(dataset)
        dataset.refresh_from_db()
        return Response(s.DatasetSerializer(dataset).data)


def upload_state(dataset: Dataset) -> dict[str, Any]:
    return {
        "id": dataset.pk,
        "status": dataset.status,
        "received": dataset.received,
        "size": dataset.size,
    }
