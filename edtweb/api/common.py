"""What every API view shares: owner scoping, paging, and capped multipart uploads."""

from __future__ import annotations

from typing import Any

from django.core.files.uploadhandler import StopUpload, TemporaryFileUploadHandler
from django.db.models import Model, QuerySet
from django.http import HttpRequest, QueryDict
from django.utils.datastructures import MultiValueDict
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

from edtweb.api.errors import ApiError, not_found
from edtweb.ownership import READ, may, owned, refusal

# Room for the multipart envelope (boundaries, part headers, small fields) around the file.
MULTIPART_SLACK = 64 * 1024


def scoped(request: Request, model: type[Model]) -> QuerySet[Any]:
    """The objects ``request``'s user may see: their own (jobs: and their teams'); staff
    see all."""
    return owned(request._request, model)


class Owned:
    """A view's queryset and object through ``scoped``: an object the user may not see is a
    404, exactly like one that does not exist; a job they see (their team's) but may not do
    what ``need`` asks with (edtweb/ownership.py) is a 403."""

    model: type[Model]
    noun = "object"
    request: Request
    kwargs: dict[str, Any]

    def get_queryset(self) -> QuerySet[Any]:
        return scoped(self.request, self.model)

    def get_object(self, need: str = READ) -> Any:
        pk = self.kwargs["pk"]
        found = scoped(self.request, self.model).filter(pk=pk).first()
        if found is None:
            raise not_found(self.noun, pk)
        if need != READ and not may(self.request.user, found, need):
            raise ApiError(refusal(found, need), 403)
        return found


class Pages(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000


class CappedUpload(TemporaryFileUploadHandler):
    """Streams a multipart file part to a temporary file and stops reading the request once
    more than ``limit`` bytes came (the rest of the body is never read). A body announced
    as larger than that is not read at all."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0
        self.exceeded = False

    def handle_raw_input(
        self, input_data: Any, META: Any, content_length: int, boundary: Any, encoding: Any = None
    ) -> tuple[QueryDict, MultiValueDict[str, Any]] | None:
        if content_length > self.limit + MULTIPART_SLACK:
            self.exceeded = True
            return QueryDict(), MultiValueDict()  # parsed as empty: nothing is read
        return None

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.exceeded = True
            raise StopUpload(connection_reset=True)
        return super().receive_data_chunk(raw_data, start)


class CappedUploadView:
    """Mixin for views taking one multipart file: ``upload_limit()`` bytes at most, checked
    while the body is parsed (installed before authentication, which may parse it)."""

    request: Request

    def upload_limit(self) -> int:
        """Bytes one upload may hold; each view using the mixin says how many."""
        raise TypeError(f"{type(self).__name__} must define upload_limit()")

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        if request.method == "POST":
            request.upload_handlers = [CappedUpload(request, self.upload_limit())]
        return super().initialize_request(request, *args, **kwargs)  # type: ignore[misc]

    def uploaded_file(self, field: str = "file") -> Any:
        """The uploaded file; 413 if it was too large, 400 (naming the field) if missing."""
        data = self.request.data
        handlers = self.request._request.upload_handlers
        if any(getattr(h, "exceeded", False) for h in handlers):
            limit = self.upload_limit()
            raise ApiError(f"the upload is larger than the {limit:,} bytes accepted here", 413)
        upload = self.request.FILES.get(field)
        if upload is None:
            raise ValidationError({field: f"send the file as multipart/form-data field '{field}'"})
        return data, upload
