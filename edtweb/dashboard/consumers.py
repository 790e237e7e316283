"""The pages' WebSockets. Each one joins its user's group too (``live.user_group``): when
what the user may see changes (docs/architecture.md, "Tenancy"), the socket checks again,
from the database, and closes where it may no longer show what it shows; a frame that
reaches it after that is dropped."""

from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from edtweb.dashboard.slots import current_slots, visible_slots
from edtweb.ownership import visible_jobs
from edtweb.training.live import CLUSTER as CLUSTER_GROUP
from edtweb.training.live import JOBS as JOBS_GROUP
from edtweb.training.live import user_group

REVOKED = 4403  # the close code of a socket whose user may no longer see what it shows


@database_sync_to_async
def user_now(scope: dict[str, Any]) -> Any | None:
    """The socket's user as its session says now: None once the session ended (logged
    out, a new password) or the account was deactivated or deleted."""
    from django.conf import settings
    from django.contrib.auth import get_user

    key = scope["session"].session_key if scope.get("session") else None
    if not key:
        return None
    session = import_module(settings.SESSION_ENGINE).SessionStore(key)
    user = get_user(SimpleNamespace(session=session))  # type: ignore[arg-type]
    return user if user.is_authenticated else None


class Revocable(AsyncJsonWebsocketConsumer):
    """A socket in ``groups`` and its user's group, that closes once its user may no
    longer see what it shows (:meth:`may_see`)."""

    groups_joined: tuple[str, ...] = ()
    revoked = False

    async def join(self, *groups: str) -> None:
        self.groups_joined = (*groups, user_group(self.scope["user"].pk))
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)

    async def leave(self) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = ()

    async def disconnect(self, code: int) -> None:
        await self.leave()

    async def may_see(self, user: Any) -> bool:
        return True

    async def access_changed(self, event: dict[str, Any]) -> None:
        user = await user_now(self.scope)
        if user is None or not await self.may_see(user):
            self.revoked = True
            await self.leave()
            await self.close(code=REVOKED)
            return
        self.scope["user"] = user  # staff no more, say: later frames are filtered as such


class ClusterConsumer(Revocable):
    """Live cluster state for the Cluster page: the slots, then every change."""

    # WebSocket handlers ---------------------------------------------------------------

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        await self.join(CLUSTER_GROUP)
        await self.accept()
        await self.send_json({"type": "slots", "slots": await self.load_slots()})

    # Helpers ---------------------------------------------------------------------------

    @database_sync_to_async
    def load_slots(self) -> list[dict[str, Any]]:
        return visible_slots(current_slots(), self.scope["user"])

    @database_sync_to_async
    def visible(self, slots: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return visible_slots(slots, self.scope["user"])

    # Group message handlers -------------------------------------------------------------

    async def cluster_slots(self, event: dict[str, Any]) -> None:
        if self.revoked:
            return
        await self.send_json({"type": "slots", "slots": await self.visible(event["slots"])})

    async def cluster_allocation(self, event: dict[str, Any]) -> None:
        if self.revoked:
            return
        names = await self.visible_names({event["job"]})
        if event["job"] in names:
            change = {k: v for k, v in event.items() if k != "type"}
            await self.send_json({"type": "allocation", **change, "name": names[event["job"]]})

    async def cluster_allocations(self, event: dict[str, Any]) -> None:
        """A scheduler step's allocation changes, in one frame: those of jobs this user
        may see, each with its job's name."""
        if self.revoked:
            return
        changes = event["changes"]
        names = await self.visible_names({c["job"] for c in changes})
        shown = [{**c, "name": names[c["job"]]} for c in changes if c["job"] in names]
        if shown:
            await self.send_json({"type": "allocations", "changes": shown})

    @database_sync_to_async
    def visible_names(self, job_ids: set[int]) -> dict[int, str]:
        """The names of those of ``job_ids`` this user may see, from the jobs' rows: the
        chart's legend takes a job's name from its allocation, which can reach the page
        before any of the job's events is stored (and so before the history names it)."""
        if not job_ids:
            return {}
        jobs = visible_jobs(self.scope["user"]).filter(pk__in=job_ids)
        return dict(jobs.values_list("pk", "name"))


class JobConsumer(Revocable):
    """One job's live updates: metrics with sequence numbers, events, state changes, and
    after each event or state change (or a step's batch of them) the job's status
    (``training.status``), which the page shows as it is."""

    # WebSocket handlers ---------------------------------------------------------------

    async def connect(self) -> None:
        job_id = int(self.scope["url_route"]["kwargs"]["pk"])
        self.group = await self.group_if_allowed(job_id)
        if self.group is None:
            await self.close()  # not logged in, or a job this user may not see: refused
            return
        self.job_id = job_id
        await self.join(self.group, JOBS_GROUP)
        await self.accept()

    # Helpers ---------------------------------------------------------------------------

    @database_sync_to_async
    def may_see(self, user: Any) -> bool:
        return bool(visible_jobs(user).filter(pk=self.job_id).exists())

    @database_sync_to_async
    def group_if_allowed(self, job_id: int) -> str | None:
        """The job's group when the user may see the job (edtweb/ownership.py: their own,
        their teams'; staff all); the page only reads, whoever it is."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        job = visible_jobs(user).filter(pk=job_id).first()
        return job.group_name if job else None

    @database_sync_to_async
    def load_status(self) -> dict[str, Any] | None:
        from edtweb.training.models import Job
        from edtweb.training.status import status_of

        job = Job.objects.filter(pk=self.job_id).first()
        return status_of(job, self.scope["user"]).as_dict() if job else None

    async def send_status(self) -> None:
        status = await self.load_status()
        if status is not None:  # None: the job was deleted meanwhile
            await self.send_json({"type": "status", "status": status})

    # Group message handlers -------------------------------------------------------------

    async def job_metrics(self, event: dict[str, Any]) -> None:
        if self.revoked:
            return
        await self.send_json(
            {
                "type": "metrics",
                "from": event["from"],
                "to": event["to"],
                "records": event["records"],
            }
        )

    async def jobs_updates(self, event: dict[str, Any]) -> None:
        """A scheduler step's events and state changes of every job: this job's, then its
        status once."""
        if self.revoked:
            return
        mine = [u["message"] for u in event["updates"] if u["job"] == self.job_id]
        for message in mine:
            if message["type"] == "job.event":
                await self.send_json({"type": "event", "event": message["event"]})
            elif message["type"] == "job.state":
                await self.send_json({"type": "state", "state": message["state"]})
        if mine:
            await self.send_status()

    async def job_event(self, event: dict[str, Any]) -> None:
        if self.revoked:
            return
        await self.send_json({"type": "event", "event": event["event"]})
        await self.send_status()

    async def job_state(self, event: dict[str, Any]) -> None:
        if self.revoked:
            return
        await self.send_json({"type": "state", "state": event["state"]})
        await self.send_status()
