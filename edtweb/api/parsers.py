"""JSON into the API, its depth judged before it is parsed (``edtweb/jsonbounds.py``): the
parser of every JSON body (the default parser, the token endpoint's included) and the field
of a JSON value sent inside a form (a sweep's ``space``, a group's ``rules``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import serializers
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

from edtweb.jsonbounds import too_deep
from edtweb.limits import LIMITS


class BodyTooLarge(APIException):
    # (not edtweb.api.errors.ApiError: DRF imports this module while its views load)
    status_code = 413


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, reading at most the body limit and refusing a text nested too
    deep before ``json.loads`` sees it."""

    def parse(self, stream: IO[bytes], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:  # fmt: skip
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        limit = int(LIMITS["body_bytes"].high)
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise BodyTooLarge(f"body: more than the {limit} bytes a request may send")
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        why = too_deep(text)
        if why:
            raise ValidationError({"body": [why]})
        try:
            return json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


class BoundedJSONField(serializers.JSONField):
    """A JSON value; sent as text (a form's field), its depth is judged before it is
    parsed. Sent in a JSON body, the parser judged it already."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, (str, bytes)) and (
            self.binary or getattr(data, "is_json_string", False)
        ):
            text = data.decode() if isinstance(data, bytes) else str(data)
            why = too_deep(text)
            if why:
                raise ValidationError(why)
        return super().to_internal_value(data)
