"""Tokens for scripts and the CLI: trade a username and password for a token; revoke it."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import generics, permissions, status
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb.api import serializers as s
from edtweb.api.errors import ApiError

TAGS = ["auth"]


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
        responses={200: s.TokenSerializer, 400: s.problem("wrong login")},
    )
    def post(self, request: Request) -> Response:
        """Your API token, in exchange for your username and password (the same token
        each time, until it is revoked)."""
        form = self.get_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        user = authenticate(request._request, **form.validated_data)
        if user is None:
            raise ApiError("wrong username or password (or the account is disabled)", 400)
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
