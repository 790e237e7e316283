"""Tokens for scripts and the CLI: trade a username and password for a token; revoke it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from drf_spectacular.authentication import BasicScheme
from drf_spectacular.utils import extend_schema
from rest_framework import authentication, exceptions, generics, permissions, status
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb import throttle
from edtweb.api import serializers as s
from edtweb.api.errors import ApiError

TAGS = ["auth"]


def refuse_if_throttled(username: str) -> None:
    """A 429 with Retry-After while ``username`` has failed too often (edtweb/throttle.py)."""
    seconds = throttle.wait(username)
    if seconds:
        raise exceptions.Throttled(wait=seconds, detail=throttle.message(seconds))


class ThrottledBasicAuthentication(authentication.BasicAuthentication):
    """WMLA's Basic credentials, their failures counted as the token endpoint's are."""

    def authenticate_credentials(self, userid: str, password: str,
                                 request: Any = None) -> tuple[Any, None]:  # fmt: skip
        refuse_if_throttled(userid)
        try:
            found: tuple[Any, None] = super().authenticate_credentials(userid, password, request)
        except exceptions.AuthenticationFailed:
            throttle.failed(userid)
            raise
        throttle.succeeded(userid)
        return found


class ThrottledBasicScheme(BasicScheme):
    """The schema's basic authentication, as Django REST framework's."""

    target_class = "edtweb.api.auth.ThrottledBasicAuthentication"


class TokenView(generics.GenericAPIView):
    serializer_class = s.LoginSerializer

    def get_permissions(self) -> list[object]:
        # Logging in needs no credentials; revoking needs them.
        if self.request.method == "POST":
            return [permissions.AllowAny()]
        return super().get_permissions()

    @extend_schema(
        tags=TAGS,
        auth=[],
        responses={200: s.TokenSerializer, 400: s.problem("wrong login"),
                   429: s.problem("too many failed logins with this username: the "
                                  "Retry-After header says for how many seconds")},
    )  # fmt: skip
    def post(self, request: Request) -> Response:
        """Your API token, in exchange for your username and password (the same token
        each time, until it is revoked). Past ``EDT_LOGIN_FAILURES`` failed logins with a
        username within ``EDT_LOGIN_WINDOW`` seconds, a 429 until the window ends."""
        form = self.get_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        username = form.validated_data["username"]
        refuse_if_throttled(username)
        user = authenticate(request._request, **form.validated_data)
        if user is None:
            throttle.failed(username)
            raise ApiError("wrong username or password (or the account is disabled)", 400)
        throttle.succeeded(username)
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key, "username": user.get_username()})

    @extend_schema(tags=TAGS, request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        """Revoke your token: every client that uses it must log in again."""
        Token.objects.filter(user=request.user).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class Me(generics.GenericAPIView):
    @extend_schema(tags=TAGS, responses={200: s.UserSerializer})
    def get(self, request: Request) -> Response:
        """Who the credentials belong to."""
        user = request.user
        return Response({"username": user.get_username(), "is_staff": user.is_staff})
