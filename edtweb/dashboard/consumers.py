from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from edtweb.dashboard.slots import current_slots, visible_slots
from edtweb.ownership import visible_jobs
from edtweb.training.live import CLUSTER as CLUSTER_GROUP
from edtweb.training.live import JOBS as JOBS_GROUP


class ClusterConsumer(AsyncJsonWebsocketConsumer):
    """Live cluster state for the Cluster page: the slots, then every change."""

    # WebSocket handlers ---------------------------------------------------------------

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        await self.channel_layer.group_add(CLUSTER_GROUP, self.channel_name)
        await self.accept()
        await self.send_json({"type": "slots", "slots": await self.load_slots()})

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(CLUSTER_GROUP, self.channel_name)

    # Helpers ---------------------------------------------------------------------------

    @database_sync_to_async
    def load_slots(self) -> list[dict[str, Any]]:
        return visible_slots(current_slots(), self.scope["user"])

    @database_sync_to_async
    def visible(self, slots: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return visible_slots(slots, self.scope["user"])

    # Group message handlers -------------------------------------------------------------

    async def cluster_slots(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "slots", "slots": await self.visible(event["slots"])})

    async def cluster_allocation(self, event: dict[str, Any]) -> None:
        names = await self.visible_names({event["job"]})
        if event["job"] in names:
            change = {k: v for k, v in event.items() if k != "type"}
            await self.send_json({"type": "allocation", **change, "name": names[event["job"]]})

    async def cluster_allocations(self, event: dict[str, Any]) -> None:
        """A scheduler step's allocation changes, in one frame: those of jobs this user
        may see, each with its job's name."""
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


class JobConsumer(AsyncJsonWebsocketConsumer):
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
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.channel_layer.group_add(JOBS_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.channel_layer.group_discard(JOBS_GROUP, self.channel_name)

    # Helpers ---------------------------------------------------------------------------

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
        mine = [u["message"] for u in event["updates"] if u["job"] == self.job_id]
        for message in mine:
            if message["type"] == "job.event":
                await self.send_json({"type": "event", "event": message["event"]})
            elif message["type"] == "job.state":
                await self.send_json({"type": "state", "state": message["state"]})
        if mine:
            await self.send_status()

    async def job_event(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "event", "event": event["event"]})
        await self.send_status()

    async def job_state(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "state", "state": event["state"]})
        await self.send_status()
