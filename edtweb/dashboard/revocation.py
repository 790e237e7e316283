"""Access taken away reaches open sockets at once (docs/architecture.md, "Tenancy"): a
member removed from a team (so also a team deleted, which removes its members), an account
deactivated, deleted, demoted from staff or given a new password, a session logged out.
Each tells the user's sockets to check again (``live.publish_access_changed``), once the
change is committed: the check reads the database, and must see the change."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model, user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from edtweb.tenancy.models import Membership
from edtweb.training import live


def changed(user_id: int | None) -> None:
    if user_id is not None:
        transaction.on_commit(lambda: live.publish_access_changed({user_id}))


def membership_deleted(sender: Any, instance: Membership, **kwargs: Any) -> None:
    changed(instance.user_id)


def user_saved(sender: Any, instance: Any, created: bool, update_fields: Any = None,
               **kwargs: Any) -> None:  # fmt: skip
    """Any change but a login's own ``last_login`` (active, staff, password among them)."""
    if not created and set(update_fields or ()) != {"last_login"}:
        changed(instance.pk)


def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    changed(instance.pk)


def logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    changed(getattr(user, "pk", None))


def connect() -> None:
    user = get_user_model()
    post_delete.connect(membership_deleted, sender=Membership, dispatch_uid="edt-revoke-member")
    post_save.connect(user_saved, sender=user, dispatch_uid="edt-revoke-user-saved")
    post_delete.connect(user_deleted, sender=user, dispatch_uid="edt-revoke-user-deleted")
    user_logged_out.connect(logged_out, dispatch_uid="edt-revoke-logout")
