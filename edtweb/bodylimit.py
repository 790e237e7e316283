"""Every request's body bounded before anything reads it: the first middleware, so that no
view, parser, form, CSRF check or authentication (the token endpoint's included) has read a
byte of it yet. A body larger than ``LIMITS["body_bytes"]`` is refused with a 413, whatever
the endpoint, unless it is an upload's: ``multipart/form-data`` (each upload view caps its
own files as they stream in, ``edtweb/api/common.py``) or ``application/octet-stream`` (a
dataset's chunks, capped by their view), or has no type at all (nothing parses it). A JSON
body's depth is judged by the API's parser (``edtweb/api/parsers.py``)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin

from edtweb.limits import LIMITS

UPLOAD_TYPES = ("multipart/form-data", "application/octet-stream", "")


def refusal(request: HttpRequest) -> HttpResponse | None:
    """The answer to a request whose body may not be read, or None."""
    raw = request.META.get("CONTENT_LENGTH") or "0"
    try:
        size = int(raw)
    except ValueError:
        return refused(400, f"Content-Length: a number of bytes, not {raw!r}")
    limit = LIMITS["body_bytes"].high
    if size <= limit or (request.content_type or "").lower() in UPLOAD_TYPES:
        return None
    return refused(413, f"the request's body is {size} bytes, more than the {limit} a "
                        f"request may send (uploads go as multipart/form-data, or in "
                        f"chunks)")  # fmt: skip


def refused(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message, "fields": {"body": [message]}}, status=status)


class BoundedBody(MiddlewareMixin):
    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        return refusal(request)
