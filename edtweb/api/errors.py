"""Every API error is JSON a person can act on: ``{"error": "...", "fields": {...}}``.

``error`` is one sentence naming what to fix; ``fields`` (validation errors only) maps each
offending field to its messages. The status code is the usual one: 400 malformed, 401 no or
bad credentials, 403 seen but not yours to change (a job of your team; a staff-only write),
404 not found (or not yours), 409 a conflict with the object's state, 413 too large.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from edtweb import jsonbounds, usercaps
from edtweb.datasets.services import UploadError
from edtweb.registry.services import ModelUploadError

log = logging.getLogger("edt.api")

LOGIN_HINT = (
    "send 'Authorization: Token <token>' (get one with POST /api/v1/auth/token/ "
    "or `edt login`), or log in to the web pages"
)


class ApiError(exceptions.APIException):
    """An error with its status and any extra keys for the body (e.g. an upload's offset)."""

    def __init__(self, message: str, status_code: int = 400, **extra: Any) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.extra = extra


def not_found(what: str, pk: Any) -> exceptions.NotFound:
    return exceptions.NotFound(f"no {what} {pk}: it does not exist or is not yours")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    exc = _translate(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        log.exception("API error", exc_info=exc)
        return Response(
            {"error": f"internal error ({type(exc).__name__}); it is in the server's log"},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    response.data = _body(exc, response.data)
    return response


def _translate(exc: Exception) -> Exception:
    """Our services' errors as DRF exceptions with the right status."""
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        return exceptions.ValidationError(detail)
    if isinstance(exc, UploadError):
        extra = {"offset": exc.offset} if exc.offset is not None else {}
        return ApiError(str(exc), exc.status, **extra)
    if isinstance(exc, ModelUploadError):
        return ApiError(str(exc), 400)
    if isinstance(exc, usercaps.OverCap):
        return ApiError(str(exc), exc.status, cap=exc.setting, limit=exc.limit)
    if isinstance(exc, jsonbounds.Refused):
        return ApiError(str(exc), exc.status)
    # A form's field over Django's DATA_UPLOAD_MAX_MEMORY_SIZE, or too many fields or files
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return ApiError(f"the request's form fields are more than the {limit} bytes EDT reads "
                        f"(a file goes as a file)", 413)  # fmt: skip
    if isinstance(exc, (TooManyFieldsSent, TooManyFilesSent)):
        return ApiError(f"{exc}", 400)
    # Reworded in place: the view has already set their status and WWW-Authenticate header.
    if isinstance(exc, exceptions.NotAuthenticated):
        exc.detail = exceptions.ErrorDetail(f"authentication required: {LOGIN_HINT}", "auth")
    elif isinstance(exc, exceptions.AuthenticationFailed) and "token" in str(exc.detail).lower():
        exc.detail = exceptions.ErrorDetail(
            f"{exc.detail} It may have been revoked: log in again (`edt login`).", "auth"
        )
    return exc


def _body(exc: Exception, data: Any) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        fields = _fields(data)
        message = "; ".join(
            " ".join(msgs) if name == "non_field_errors" else f"{name}: {' '.join(msgs)}"
            for name, msgs in fields.items()
        )
        return {"error": message or "invalid request", "fields": fields}
    message = data.get("detail", data) if isinstance(data, dict) else data
    return {"error": str(message), **getattr(exc, "extra", {})}


def _fields(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Validation details flattened to ``{"field": [messages]}`` (nested as ``a.b``)."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                out.update(_fields(value, name))
            else:
                out[name] = [str(v) for v in (value if isinstance(value, list) else [value])]
        return out
    messages = detail if isinstance(detail, list) else [detail]
    return {prefix or "non_field_errors": [str(m) for m in messages]}


def unknown_endpoint(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """A JSON 404 for any path under the API that names no endpoint."""
    message = f"no endpoint {request.path}; the API is described at /api/v1/docs/"
    if not request.path.endswith("/"):
        try:
            if resolve(request.path + "/").func is not unknown_endpoint:
                message = f"no endpoint {request.path}: did you mean {request.path}/ ?"
        except Resolver404:
            pass
    return JsonResponse({"error": message}, status=404)
