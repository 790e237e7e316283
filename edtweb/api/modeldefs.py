"""Model definitions over the API: upload (checked in a child process), list, detail with
the check's result, source, delete."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb.api import serializers as s
from edtweb.api.common import CappedUploadView, Owned, Pages, scoped
from edtweb.registry import services
from edtweb.registry.models import ModelDefinition

TAGS = ["models"]


class ModelList(CappedUploadView, generics.ListAPIView):
    serializer_class = s.ModelDefinitionSerializer
    pagination_class = Pages
    parser_classes = [MultiPartParser]

    def get_queryset(self) -> Any:
        return scoped(self.request, ModelDefinition).select_related("owner")

    def upload_limit(self) -> int:
        return services.MAX_MODEL_BYTES

    @extend_schema(tags=TAGS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Your model definitions, newest first (staff: everyone's)."""
        return super().get(request, *args, **kwargs)

    @extend_schema(
        tags=TAGS,
        request={"multipart/form-data": s.ModelUploadSerializer},
        responses={
            201: s.ModelDefinitionSerializer,
            400: s.problem("malformed, or no such entry module"),
            413: s.problem("over 50 MiB"),
        },
    )
    def post(self, request: Request) -> Response:
        """Upload a .py file or an archive (with ``entry``). Its check runs in a child
        process: status CHECKING, then VALID, or INVALID with the error and its line."""
        data, upload = self.uploaded_file()
        form = s.ModelUploadSerializer(
            data={"name": data.get("name", ""), "entry": data.get("entry", ""), "file": upload}
        )
        form.is_valid(raise_exception=True)
        name = form.validated_data.get("name") or upload.name.rsplit(".", 1)[0]
        model = services.create(
            request.user, name, upload.name, upload.read(), form.validated_data["entry"].strip()
        )
        return Response(s.ModelDefinitionSerializer(model).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=TAGS)
class ModelDetail(Owned, generics.RetrieveDestroyAPIView):
    """A model definition and its check's result: style, parameters, output shape, or the
    error and the line of the file it came from."""

    model = ModelDefinition
    noun = "model"
    serializer_class = s.ModelDefinitionSerializer

    def perform_destroy(self, instance: ModelDefinition) -> None:
        services.delete(instance)

    def delete(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Delete the model definition and its files."""
        return super().delete(request, *args, **kwargs)


class ModelSource(Owned, generics.GenericAPIView):
    model = ModelDefinition
    noun = "model"

    @extend_schema(tags=TAGS, responses={200: s.ModelSourceSerializer})
    def get(self, request: Request, pk: int) -> Response:
        """The entry module's source, as the model's page shows it."""
        model = self.get_object()
        path = model.entry_path
        source = path.read_text(errors="replace") if path.exists() else ""
        return Response({"entry": model.entry, "source": source})
