"""Every object is scoped to its owner; staff see all."""

from __future__ import annotations

from typing import Any

from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.shortcuts import get_object_or_404


def owned(request: HttpRequest, model: type[Model]) -> QuerySet[Any]:
    objects = model.objects.all()  # type: ignore[attr-defined]
    user = request.user
    return objects if user.is_staff else objects.filter(owner=user)


def get_owned(request: HttpRequest, model: type[Model], pk: int) -> Any:
    """The object, or 404 when it does not exist or belongs to someone else."""
    return get_object_or_404(owned(request, model), pk=pk)
