"""Redis key names of the elastic protocol (all under the ``edt:`` prefix).

Slots:

- ``edt:slots``: set of every slot id ever registered (``<host>.<index>``).
- ``edt:slot:<id>``: hash describing the slot: host, index, device, queue, pid, state.
- ``edt:slot:<id>:hb``: the heartbeat, a JSON telemetry sample with a TTL. A slot is alive
  while this key exists; it is *lost* when the key expired without a clean shutdown, and
  *offline* when its worker shut down cleanly.

Jobs::

    edt:job:<id>:gen            the latest generation number (learners' rank 0 reads it)
    edt:job:<id>:gen:<n>        JSON list of the slots of generation n, in rank order
    edt:job:<id>:gen:<n>:batch  goodput mode: the global batch generation n trains at (an
                                integer, written before the list; absent: the learners keep
                                the batch they have, the one in the job's training state)
    edt:job:<id>:adopted        the latest generation whose process group formed
    edt:job:<id>:ready          set of slots whose learner is READY to join
    edt:job:<id>:failures       list of JSON failure reports from learners
    edt:job:<id>:errors         list of JSON reports of errors in the user's code
    edt:job:<id>:stop           present when the job must checkpoint and stop
    edt:job:<id>:checkpoint     the step of the latest checkpoint
    edt:job:<id>:dispatch       hash slot -> token of the learner task sent to it
    edt:job:<id>:kill           hash slot -> signal the slot's task must send to its learner
    edt:job:<id>:exits          hash slot -> exit code of its learner
    edt:job:<id>:crashes        hash slot -> the last error a learner that failed there printed
    edt:job:<id>:lease:<slot>   the token of the learner alive on the slot, with a short TTL
    edt:job:<id>:metrics        stream of per-iteration and per-epoch records
    edt:job:<id>:cursor         the last record of that stream stored in the database
    edt:job:<id>:finished       the step of the learners' ``done`` record, once it is stored

Every learner and slot task write above (and the metrics consumer's finished) adds the
job's id to edt:scheduler:changed, in the same round trip and after the write: the
scheduler takes that set at each step and reads again only those jobs
(``scheduler.store.ObservedJobStore``).

The web::

    edt:login:failures:<hash>   failed logins with one username (its hash) in the window
                                that began with the first; expires with the window
"""

from __future__ import annotations

PREFIX = "edt:"
SLOTS_KEY = PREFIX + "slots"

ALIVE = "alive"
LOST = "lost"
OFFLINE = "offline"


def slot_id_for(host: str, index: int) -> str:
    return f"{host}.{index}"


def queue_for(slot_id: str) -> str:
    """The Celery queue a slot's worker consumes: ``slot.<host>.<index>``."""
    return f"slot.{slot_id}"


LEASE_KEY = PREFIX + "scheduler:lease"
METRICS_LEASE_KEY = PREFIX + "metrics:lease"  # held by the one active metrics consumer
WAKE_KEY = PREFIX + "scheduler:wake"
ALLOCATIONS_KEY = PREFIX + "scheduler:allocations"  # the allocation record (scheduler.store)
# The teams' shares over time, per resource group, written by the scheduler when they change
# (at most once a second; capped): a stream whose entries have one field, ``data``, JSON
# {"t": unix time, "groups": {group: {"capacity": slots, "held": slots held in the group,
# "teams": {team id ("" for jobs of no team): {"held": slots, "entitled": slots (exact),
# "demand": slots, each counting its sub-teams'; "weight", "guarantee", "limit" (null: none)
# as the group read them; "users": {owner: {"held": slots, "entitled": slots (exact)}} of its
# own jobs}}, "queue": {team id: [its own job ids waiting, in order]}}}}; a team is there
# when its jobs ask for slots or it has a guarantee in the group. Read by the Cluster page's
# chart and the Shares page (scheduler.store).
SHARES_KEY = PREFIX + "scheduler:shares"
SHARES_KEPT = 20000
# The active scheduler's own Prometheus metrics, as text (scheduler/metrics.py).
SCHEDULER_METRICS_KEY = PREFIX + "scheduler:metrics"
# The sweep driver's lease, and its wake-ups (a sweep created, stopped or resumed; a trial's
# metrics stored): edtweb/sweeps/driver.py.
SWEEPS_LEASE_KEY = PREFIX + "sweeps:lease"
SWEEPS_WAKE_KEY = PREFIX + "sweeps:wake"
# The ids of the jobs whose learners, slot tasks or metrics consumer wrote something the
# scheduler reads, since it last took the set (``scheduler.store.take_changed``).
CHANGED_KEY = PREFIX + "scheduler:changed"


def slot_key(slot_id: str) -> str:
    return f"{PREFIX}slot:{slot_id}"


def hb_key(slot_id: str) -> str:
    return f"{PREFIX}slot:{slot_id}:hb"


def job_key(job_id: str, suffix: str) -> str:
    return f"{PREFIX}job:{job_id}:{suffix}"


def login_failures_key(name_hash: str) -> str:
    """Failed logins with the username whose hash is ``name_hash`` (edtweb/throttle.py)."""
    return f"{PREFIX}login:failures:{name_hash}"
