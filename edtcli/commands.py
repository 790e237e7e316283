"""What each `edt` command does. Each takes the parsed arguments and a logged-in client,
prints to stdout (JSON with ``--json``) and returns nothing; failures raise ``CliError``."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from edtcli.client import Client, CliError
from edtcli.output import emit_json, fields, table
from edtcli.progress import Progress, size

CHUNK = 4 * 1024 * 1024
ENDED = ("COMPLETED", "FAILED", "STOPPED")
POLL = 1.0


def show(args: argparse.Namespace, value: Any, human: Any) -> None:
    """JSON for --json, else ``human`` (a callable printing it, or a line)."""
    if args.json:
        emit_json(value)
    elif callable(human):
        human(value)
    else:
        print(human)


# Datasets --------------------------------------------------------------------------------

DATASET_COLUMNS = [("id", "id"), ("name", "name"), ("status", "status"),
                   ("format", "format"), ("size_shown", "size"), ("owner", "owner")]  # fmt: skip


def datasets_list(args: argparse.Namespace, api: Client) -> None:
    rows = list(api.pages("datasets/"))
    shown = [{**d, "size_shown": size(d["size"])} for d in rows]
    show(args, rows, lambda _: table(shown, DATASET_COLUMNS))


def datasets_show(args: argparse.Namespace, api: Client) -> None:
    found = api.call("GET", f"datasets/{args.id}/")
    show(args, found, _describe_dataset)


def _describe_dataset(dataset: dict[str, Any]) -> None:
    fields(dataset, ["id", "name", "owner", "status", "format", "size", "filename", "error",
                     "created_at"])  # fmt: skip
    for split, info in dataset.get("summary", {}).get("splits", {}).items():
        print(f"{split:<8}  {info.get('count', 0)} samples")


def datasets_upload(args: argparse.Namespace, api: Client) -> None:
    """Chunked and resumable: the size is announced first (an oversized archive is refused
    before a byte is sent), then 4 MiB pieces; a dropped piece is retried from where the
    server says the upload stands."""
    path = Path(args.path)
    if not path.is_file():
        raise CliError(f"no file {path}")
    total = path.stat().st_size
    if args.resume:
        state = api.call("GET", f"datasets/uploads/{args.resume}/")
        if state["size"] != total:
            raise CliError(f"upload {args.resume} is for {state['size']} bytes, not {total}")
    else:
        body = {"name": args.name or path.name.split(".")[0], "filename": path.name, "size": total}
        state = api.call("POST", "datasets/uploads/", body)
    pk = state["id"]
    bar = Progress(f"upload {path.name}", total, quiet=args.quiet)
    with path.open("rb") as source:
        received = state["received"]
        while received < total:
            received = _put_chunk(api, pk, source, received, total)
            bar(received)
    bar.finish()
    dataset = api.call("POST", f"datasets/uploads/{pk}/complete/")
    if not args.no_wait:
        dataset = _wait_dataset(api, pk)
    show(args, dataset, f"dataset {pk} {dataset['status']}: {dataset['name']}")


def datasets_add(args: argparse.Namespace, api: Client) -> None:
    """A dataset read where it lies on the cluster's storage: the path is the cluster's
    (under a data root), not this machine's; nothing is uploaded."""
    dataset = api.call("POST", "datasets/register/", {"name": args.name, "path": args.path})
    if not args.no_wait:
        dataset = _wait_dataset(api, dataset["id"])
    show(args, dataset, f"dataset {dataset['id']} {dataset['status']}: {dataset['name']} "
                        f"(in place at {dataset['source']})")  # fmt: skip


def _put_chunk(api: Client, pk: int, source: Any, start: int, total: int, tries: int = 3) -> int:
    """Send the chunk at ``start``; on a dropped connection or a conflict, ask the server
    where the upload stands and send from there. Returns the bytes it now holds."""
    for attempt in range(tries):
        try:
            if attempt:
                time.sleep(0.5 * attempt)
                start = int(api.call("GET", f"datasets/uploads/{pk}/")["received"])
            state = api.put_chunk(f"datasets/uploads/{pk}/", source, start, CHUNK, total)
            return int(state["received"])
        except CliError as exc:
            if exc.status not in (None, 409) or attempt == tries - 1:
                hint = f"; resume with `edt datasets upload FILE --resume {pk}`"
                raise CliError(f"{exc}{hint}", exc.status) from None
    raise AssertionError("unreachable")


def _wait_dataset(api: Client, pk: int) -> Any:
    while True:
        dataset = api.call("GET", f"datasets/{pk}/")
        if dataset["status"] == "READY":
            return dataset
        if dataset["status"] == "FAILED":
            raise CliError(f"dataset {pk} FAILED: {dataset['error']}")
        time.sleep(POLL / 2)


def datasets_delete(args: argparse.Namespace, api: Client) -> None:
    api.call("DELETE", f"datasets/{args.id}/")
    show(args, {"id": args.id, "deleted": True}, f"dataset {args.id} deleted")


# Models ----------------------------------------------------------------------------------

MODEL_COLUMNS = [("id", "id"), ("name", "name"), ("status", "status"), ("style", "style"),
                 ("entry", "entry"), ("parameters", "parameters"), ("owner", "owner")]  # fmt: skip
MODEL_KEYS = ["id", "name", "owner", "status", "entry", "style", "parameters", "output_shape",
              "error", "error_line", "warnings", "created_at"]  # fmt: skip


def models_list(args: argparse.Namespace, api: Client) -> None:
    rows = list(api.pages("models/"))
    show(args, rows, lambda r: table(r, MODEL_COLUMNS))


def models_show(args: argparse.Namespace, api: Client) -> None:
    show(args, api.call("GET", f"models/{args.id}/"), lambda m: fields(m, MODEL_KEYS))


def models_upload(args: argparse.Namespace, api: Client) -> None:
    path = Path(args.path)
    if not path.is_file():
        raise CliError(f"no file {path}")
    form = {"name": args.name or path.name.rsplit(".", 1)[0], "entry": args.entry or ""}
    model = api.post_file("models/", form, path)
    while not args.no_wait and model["status"] == "CHECKING":
        time.sleep(POLL / 2)
        model = api.call("GET", f"models/{model['id']}/")
    if model["status"] == "INVALID":
        where = f" ({model['error_line']})" if model.get("error_line") else ""
        raise CliError(f"model {model['id']} INVALID: {model['error']}{where}")
    show(args, model, f"model {model['id']} {model['status']}: {model['name']}")


def models_delete(args: argparse.Namespace, api: Client) -> None:
    api.call("DELETE", f"models/{args.id}/")
    show(args, {"id": args.id, "deleted": True}, f"model {args.id} deleted")


# Jobs ------------------------------------------------------------------------------------

HOURS = [("slot_hours", "slot-hours"), ("used_slot_hours", "used")]  # allocated, and busy
WAITS = [("average_wait_s", "avg wait s"), ("waits", "waits"), ("shrinks", "shrinks"),
         ("reclaims", "reclaims")]  # fmt: skip

JOB_COLUMNS = [("id", "id"), ("name", "name"), ("state", "state"), ("workers", "workers"),
               ("priority", "priority"), ("progress", "progress"), ("owner", "owner"),
               ("team", "team"), ("estimate_text", "estimate")]  # fmt: skip
JOB_KEYS = ["id", "name", "owner", "team", "resource_group", "state", "priority", "workers",
            "progress", "eta_seconds", "waiting", "position", "reason", "estimate_text", "idle",
            "model",
            "dataset",
            "epochs", "batch_size", "batch_range", "lr", "checkpoints", "logs", "model_ready",
            "error", "created_at", "started_at", "finished_at", "sweep", "trial_number",
            "hparams", "trial_state", "objective"]  # fmt: skip
SUBMIT_FIELDS = ("name", "epochs", "batch_size", "max_workers", "min_workers", "priority",
                 "checkpoint_every", "lr", "max_micro_batch", "precision", "image_size",
                 "loader_workers", "augment")  # fmt: skip


def _readable(job: dict[str, Any]) -> dict[str, Any]:
    """The job as people read it: workers now/max, progress in percent, lists joined."""
    shown = {k: ", ".join(map(str, v)) if isinstance(v, list) else v for k, v in job.items()}
    shown["workers"] = f"{job['workers']}/{job['max_workers']}"
    shown["progress"] = f"{100 * job['progress']:.0f}%"
    if job.get("batch_max"):  # goodput mode's; else the batch is fixed
        shown["batch_range"] = f"{job['batch_min']}-{job['batch_max']}"
    return shown


def submit(args: argparse.Namespace, api: Client) -> None:
    body = {k: getattr(args, k) for k in SUBMIT_FIELDS if getattr(args, k) is not None}
    if getattr(args, "batch_range", None) is not None:  # goodput mode
        body["batch_min"], body["batch_max"] = args.batch_range
    body["model"] = _resolve(api, "models/", args.model, "model")
    body["dataset"] = _resolve(api, "datasets/", args.dataset, "dataset")
    if args.team is not None:  # left out: the server puts it into your default team
        body["team"] = args.team
    if args.group:
        body["resource_group"] = args.group
    job = api.call("POST", "jobs/", body)
    team = f" in team {job['team']}" if job.get("team") else ""
    show(args, job, f"job {job['id']} {job['state']}: {job['name']}{team}")


def _resolve(api: Client, path: str, ref: str, what: str) -> int:
    """An id, or the newest of your objects with that name."""
    if ref.isdigit():
        return int(ref)
    named = [o for o in api.pages(path) if o["name"] == ref]
    if not named:
        raise CliError(f"no {what} named {ref!r}; `edt {what}s list` shows yours")
    return int(named[0]["id"])


def jobs_list(args: argparse.Namespace, api: Client) -> None:
    rows = list(api.pages("jobs/", {"state": getattr(args, "state", None)}))
    show(args, rows, lambda r: table([_readable(j) for j in r], JOB_COLUMNS))


def jobs_show(args: argparse.Namespace, api: Client) -> None:
    job = api.call("GET", f"jobs/{args.job}/")
    show(args, job, lambda j: fields(_readable(j), JOB_KEYS))


def why(args: argparse.Namespace, api: Client) -> None:
    """Why a job waits, or why it has the slots it has, in the scheduler's own words; when
    it should start and end; and its team's share: entitled, held, borrowed or lent, asked
    (the teams' shares the scheduler writes; another team's numbers only for staff)."""
    job = api.call("GET", f"jobs/{args.job}/")
    place = (
        f"{job['position']} in group {job['resource_group']}'s queue; "
        if job.get("position")
        else ""
    )
    lines = [
        f"job {job['id']} {job['state']}: {place}{job.get('reason') or 'no decision about it'}"
    ]
    if job.get("estimate_text"):
        lines.append(job["estimate_text"])
    if job.get("idle"):
        lines.append(job["idle"])
    share = team_share(api, job)
    if share:
        lines.append(share["text"])
    shown = {**{k: job.get(k) for k in WHY_KEYS}, "share": share}
    show(args, shown, "\n".join(lines))


WHY_KEYS = ("id", "state", "resource_group", "workers", "max_workers", "position", "reason",
            "start_estimate", "end_estimate", "estimate_text", "idle", "idle_since")  # fmt: skip


def team_share(api: Client, job: dict[str, Any]) -> dict[str, Any] | None:
    """The job's team's line in its group as the scheduler last published it (the server's
    ``teams/{name}/share/``; for jobs of no team, staff's ``cluster/shares/teams/``): slots
    held, fair share, guarantee, borrowed, lent, asked."""
    team = job.get("team") or ""
    try:
        answer = api.call("GET", f"teams/{quote(team, safe='')}/share/" if team
                          else "cluster/shares/teams/")  # fmt: skip
    except CliError:  # a team one may not see (a staff member's job of another team)
        return None
    found = next((t for t in answer.get("teams", []) if t.get("team") == team), None)
    line = next((g for g in (found or {}).get("groups", [])
                 if g.get("group") == job["resource_group"]), None)  # fmt: skip
    if line is None:
        return None
    name = f"team {team}" if team else "jobs of no team"
    fair = float(line["entitled"])
    text = (f"{name} in group {line['group']}: holds {line['held']} of {line['capacity']} "
            f"slots, entitled to {fair:.1f} (guarantee {line['guarantee']}, then weight "
            f"{line['weight']}), {lending(line)}; asks for {line['demand']}")  # fmt: skip
    return {"team": team, **{k: line[k] for k in SHARE_KEYS}, "text": text}


SHARE_KEYS = ("held", "entitled", "demand", "capacity", "guarantee", "weight", "borrowed", "lent")


def lending(line: dict[str, Any]) -> str:
    """What a team's line says it borrows or lends (the server's numbers)."""
    parts = [f"borrows {line['borrowed']}" if line.get("borrowed") else "",
             f"lends {line['lent']}" if line.get("lent") else ""]  # fmt: skip
    return " and ".join(p for p in parts if p) or "within its guarantee"


def share(args: argparse.Namespace, api: Client) -> None:
    """Why each of your teams (staff: every team) has its share, as the scheduler last
    published it: per group its guarantee, weight, fair share, held, borrowed or lent; its
    users' parts; its waiting jobs with the scheduler's reasons."""
    path = f"teams/{quote(args.team, safe='')}/share/" if args.team else "cluster/shares/teams/"
    answer = api.call("GET", path)

    def human(a: dict[str, Any]) -> None:
        if a.get("note"):
            print(a["note"])
        for team in a["teams"]:
            print(f"{'team ' + team['name'] if team['team'] else 'jobs of no team'}:")
            table(team["groups"], SHARE_COLUMNS)
            for line in team["groups"]:
                for user in line["users"]:
                    print(f"  {user['user']} in {line['group']}: fair share {user['entitled']}, "
                          f"holds {user['held']}")  # fmt: skip
            for job in team["waiting"]:
                print(f"  waiting: job {job['id']} {job['name']} ({job['owner']}): "
                      f"{job['reason'] or 'no decision about it'}")  # fmt: skip
            print()

    show(args, answer, human)


SHARE_COLUMNS = [("group", "group"), ("guarantee", "guarantee"), ("weight", "weight"),
                 ("limit", "limit"), ("entitled", "fair share"), ("held", "held"),
                 ("demand", "asks"), ("borrowed", "borrowed"), ("lent", "lent")]  # fmt: skip


def jobs_events(args: argparse.Namespace, api: Client) -> None:
    events = api.call("GET", f"jobs/{args.job}/events/")
    columns = [("at", "at"), ("kind", "kind"), ("message", "message")]
    show(args, events, lambda e: table(e, columns))


def jobs_metrics(args: argparse.Namespace, api: Client) -> None:
    history = api.call("GET", f"jobs/{args.job}/metrics/", query={"points": args.points})
    columns = [("step", "step"), ("epoch", "epoch"), ("loss", "loss"), ("workers", "workers")]
    show(args, history, lambda h: table(h["train"], columns))


def priority(args: argparse.Namespace, api: Client) -> None:
    if args.preview:
        path, query = f"jobs/{args.job}/priority/preview/", {"priority": args.value}
        preview = api.call("GET", path, query=query)
        show(args, preview, f"at priority {args.value}: {preview['text']}")
        return
    job = api.call("POST", f"jobs/{args.job}/priority/", {"priority": args.value})
    show(args, job, f"job {job['id']} priority {job['priority']}")


def stop(args: argparse.Namespace, api: Client) -> None:
    job = api.call("POST", f"jobs/{args.job}/stop/")
    show(args, job, f"job {job['id']} {job['state']}")


def delete(args: argparse.Namespace, api: Client) -> None:
    api.call("DELETE", f"jobs/{args.job}/")
    show(args, {"id": args.job, "deleted": True}, f"job {args.job} deleted")


def download(args: argparse.Namespace, api: Client) -> None:
    dest = Path(args.output or f"job{args.job}-{args.file}")
    if dest.is_dir():
        dest = dest / f"job{args.job}-{args.file}"
    bar = Progress(f"download {args.file}", 0, quiet=args.quiet)
    written = api.download(f"jobs/{args.job}/files/{args.file}", dest, bar)
    bar.finish()
    show(args, {"path": str(dest), "bytes": written}, str(dest))


def logs(args: argparse.Namespace, api: Client) -> None:
    """Print the learners' logs; with --follow, keep printing until the job ends: exit 0
    when it COMPLETED, 1 when it FAILED or was STOPPED."""
    reader = LogReader(api, args.job, args.slot, args.json)
    while True:
        job = api.call("GET", f"jobs/{args.job}/")
        reader.read_all()
        if not args.follow:
            return
        if job["state"] in ENDED:
            time.sleep(POLL / 2)  # what the learners wrote as they exited
            reader.read_all()
            break
        time.sleep(POLL)
    reader.flush()
    if job["state"] != "COMPLETED":
        raise CliError(f"job {job['id']} ended {job['state']}: {job['error'] or 'see its events'}")
    print(f"job {job['id']} COMPLETED", file=sys.stderr)


class LogReader:
    """Reads each slot's log from where it stopped; prints whole lines, ``slot | text``."""

    def __init__(self, api: Client, job: int, slot: str | None, as_json: bool) -> None:
        self.api, self.job, self.slot, self.as_json = api, job, slot, as_json
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, str] = {}

    def read_all(self) -> None:
        for entry in self.api.call("GET", f"jobs/{self.job}/logs/"):
            name = entry["slot"]
            if self.slot and name != self.slot:
                continue
            while self.offsets.get(name, 0) < entry["size"]:
                query = {"offset": self.offsets.get(name, 0), "limit": 1 << 20}
                chunk = self.api.call("GET", f"jobs/{self.job}/logs/{name}/", query=query)
                if not chunk["text"]:
                    break
                self.offsets[name] = chunk["offset"]
                self.emit(name, self.partial.pop(name, "") + chunk["text"])

    def emit(self, slot: str, text: str) -> None:
        *lines, rest = text.split("\n")
        if rest:
            self.partial[slot] = rest
        for line in lines:
            self.line(slot, line)

    def flush(self) -> None:
        for slot, rest in self.partial.items():
            self.line(slot, rest)
        self.partial.clear()

    def line(self, slot: str, line: str) -> None:
        if self.as_json:
            emit_compact({"slot": slot, "line": line})
        else:
            print(line if self.slot else f"{slot} | {line}", flush=True)


def emit_compact(value: Any) -> None:
    print(json.dumps(value), flush=True)


# Cluster ---------------------------------------------------------------------------------


def cluster(args: argparse.Namespace, api: Client) -> None:
    slots = api.call("GET", "cluster/slots/")
    queue = api.call("GET", "cluster/queue/")
    used = api.call("GET", "usage/", query={"by": "team", "since": "7d"})
    rows = [{**s, "job": s["job"] or ("another user's" if s["busy"] else "idle")} for s in slots]
    columns = [("slot_id", "slot"), ("device", "device"), ("state", "state"), ("job", "job")]

    teams = [{**t, "team": t["team"] or "(no team)"} for t in used["totals"]]

    def human(_: Any) -> None:
        table(rows, columns)
        if queue:
            print()
            table(queue, [("position", "queue"), ("id", "job"), ("name", "name"),
                          ("priority", "priority")])  # fmt: skip
        if teams:
            print()
            print("slot-hours in the last 7 days, of the jobs you may see:")
            table(teams, [("team", "team"), *HOURS])

    usage = {"since": used["since"], "until": used["until"], "teams": used["totals"]}
    show(args, {"slots": slots, "queue": queue, "usage": usage}, human)


def usage(args: argparse.Namespace, api: Client) -> None:
    query = {"since": args.since, "until": args.until, "by": args.by, "period": args.period}
    used = api.call("GET", "usage/", query=query)
    key = args.by

    def human(u: Any) -> None:
        named = [{**r, key: r[key] or "(no team)"} for r in u["rows"]]
        table(named, [("period", args.period), (key, key), *HOURS, *WAITS])
        if u["totals"]:
            print()
            total = [{**t, key: t[key] or "(no team)"} for t in u["totals"]]
            print(f"from {u['since']} to {u['until']}:")
            table(total, [(key, key), *HOURS, *WAITS])

    show(args, used, human)


# Admin (staff) ---------------------------------------------------------------------------


def admin_users_add(args: argparse.Namespace, api: Client) -> None:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for the new user {args.name}: ")
    if not password:
        raise CliError("no password given")
    body = {"username": args.name, "password": password, "is_staff": args.staff}
    user = api.call("POST", "users/", body)
    staff = " (staff)" if user["is_staff"] else ""
    show(args, user, f"user {user['username']} made{staff}")


def admin_users_list(args: argparse.Namespace, api: Client) -> None:
    users = api.call("GET", "users/")
    columns = [("username", "user"), ("is_staff", "staff"), ("teams", "teams")]
    show(args, users, lambda u: table([{**r, "teams": ", ".join(r["teams"])} for r in u], columns))


TEAM_COLUMNS = [("name", "team"), ("parent", "parent"), ("weight", "weight"),
                ("guarantee", "guarantee"), ("limit", "limit"), ("resource_group", "group"),
                ("allowed", "also"), ("members", "members"), ("leads", "leads")]  # fmt: skip


def _team_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for field in ("parent", "weight", "guarantee", "limit", "shrink_idle"):
        if getattr(args, field) is not None:
            body[field] = getattr(args, field)
    if args.no_limit:
        body["limit"] = None
    if args.group:
        body["resource_group"] = args.group
    if args.allow is not None:
        body["allowed_groups"] = [g for g in args.allow if g]
    return body


def _team_line(team: dict[str, Any]) -> str:
    limit = team["limit"] if team["limit"] is not None else "none"
    parent = f", in {team['parent']}" if team["parent"] else ""
    shrink = ", idle jobs shrunk to their minimum" if team.get("shrink_idle") else ""
    return (f"team {team['name']}: weight {team['weight']}, guarantee {team['guarantee']}, "
            f"limit {limit}, group {team['resource_group']}{parent}{shrink}")  # fmt: skip


def _saved(args: argparse.Namespace, api: Client, collection: str, body: dict[str, Any],
           line: Callable[[dict[str, Any]], str], hint: str = "") -> None:  # fmt: skip
    """Add ``args.name`` to ``collection`` with ``body`` (no ``hint``), or change it (``hint``
    says what may change when ``body`` is empty), and show it as ``line`` says."""
    if not hint:
        saved = api.call("POST", f"{collection}/", {"name": args.name, **body})
    elif not body:
        raise CliError(hint)
    else:
        saved = api.call("PATCH", f"{collection}/{args.name}/", body)
    show(args, saved, line(saved))


def admin_teams_add(args: argparse.Namespace, api: Client) -> None:
    _saved(args, api, "teams", _team_body(args), _team_line)


def admin_teams_set(args: argparse.Namespace, api: Client) -> None:
    hint = "say what to change: --parent, --weight, --guarantee, --limit, --group, --shrink-idle..."
    _saved(args, api, "teams", _team_body(args), _team_line, hint)


def admin_teams_list(args: argparse.Namespace, api: Client) -> None:
    teams = api.call("GET", "teams/")
    rows = [{**t, "allowed": ", ".join(t["allowed_groups"]), "leads": ", ".join(t["leads"]),
             "members": ", ".join(m["username"] for m in t["members"])} for t in teams]  # fmt: skip
    show(args, teams, lambda _: table(rows, TEAM_COLUMNS))


def admin_teams_delete(args: argparse.Namespace, api: Client) -> None:
    api.call("DELETE", f"teams/{args.name}/")
    show(args, {"name": args.name, "deleted": True}, f"team {args.name} deleted")


def admin_teams_members(args: argparse.Namespace, api: Client) -> None:
    """``members TEAM`` lists them; ``members TEAM add USER [--lead] [--default]`` adds one
    (or changes an existing member's lead and default); ``members TEAM remove USER``."""
    path = f"teams/{args.team}/members/"
    if args.change == "list":
        members = api.call("GET", path)
    elif not args.user:
        raise CliError(f"name the user: edt admin teams members {args.team} {args.change} USER")
    elif args.change == "add":
        body: dict[str, Any] = {"username": args.user}
        if args.lead is not None:
            body["lead"] = args.lead
        if args.default:
            body["default"] = True
        members = api.call("POST", path, body)
    else:
        members = api.call("DELETE", f"{path}{args.user}/")
    columns = [("username", "member"), ("lead", "lead"), ("default", "default team")]
    show(args, members, lambda m: table(m, columns))


def _group_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.rule is not None:
        body["rules"] = args.rule
    if args.position is not None:
        body["position"] = args.position
    if args.shrink_idle is not None:
        body["shrink_idle"] = args.shrink_idle
    return body


def _group_line(group: dict[str, Any]) -> str:
    rules = "; ".join(group["rule_texts"]) or "no rules"
    shrink = "; idle jobs shrunk to their minimum" if group.get("shrink_idle") else ""
    return f"group {group['name']} (position {group['position']}): {rules}{shrink}"


def admin_groups_add(args: argparse.Namespace, api: Client) -> None:
    _saved(args, api, "groups", _group_body(args), _group_line)


def admin_groups_set(args: argparse.Namespace, api: Client) -> None:
    hint = "say what to change: --rule (repeated, in order), --position or --shrink-idle"
    _saved(args, api, "groups", _group_body(args), _group_line, hint)


def admin_groups_list(args: argparse.Namespace, api: Client) -> None:
    groups = api.call("GET", "groups/")
    rows = [{**g, "rules": "; ".join(g["rule_texts"]) or "-"} for g in groups]
    columns = [("position", "position"), ("name", "group"), ("rules", "rules")]
    show(args, groups, lambda _: table(rows, columns))


def admin_groups_delete(args: argparse.Namespace, api: Client) -> None:
    api.call("DELETE", f"groups/{args.name}/")
    show(args, {"name": args.name, "deleted": True}, f"group {args.name} deleted")


# Sweeps ----------------------------------------------------------------------------------

SWEEP_COLUMNS = [("id", "id"), ("name", "name"), ("state", "state"), ("algorithm", "algorithm"),
                 ("objective_shown", "objective"), ("progress_shown", "trials"),
                 ("best_shown", "best"), ("owner", "owner")]  # fmt: skip
SWEEP_FIELDS = ("name", "objective", "direction", "algorithm", "seed", "epochs", "batch_size",
                "lr", "max_workers", "min_workers", "priority", "checkpoint_every",
                "max_micro_batch", "precision", "reduction_factor", "min_resource")  # fmt: skip


def duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``10m`` or ``2h`` (argparse's type for --max-time)."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    raw = text.strip().lower()
    scale = units.get(raw[-1:], 0.0)
    try:
        value = float(raw[:-1] if scale else raw) * (scale or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a duration such as 600, 90s, 10m or 2h, "
                                         f"not {text!r}") from None  # fmt: skip
    if value < 0:
        raise argparse.ArgumentTypeError(f"a duration is 0 or more, not {text!r}")
    return value


def load_space(path: str) -> Any:
    """The search space in a YAML or JSON file (YAML needs PyYAML; JSON never does)."""
    source = Path(path)
    if not source.is_file():
        raise CliError(f"no file {path}")
    text = source.read_text()
    if source.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise CliError(f"{path} is not valid JSON: {exc}") from None
    try:
        import yaml
    except ImportError:
        try:
            return json.loads(text)
        except ValueError:
            raise CliError(f"reading {path} needs PyYAML (pip install pyyaml); or write the "
                           f"space as JSON") from None  # fmt: skip
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is not valid YAML: {exc}") from None


def sweep_create(args: argparse.Namespace, api: Client) -> None:
    body: dict[str, Any] = {k: getattr(args, k) for k in SWEEP_FIELDS
                            if getattr(args, k, None) is not None}  # fmt: skip
    body["space"] = load_space(args.space)
    body["model"] = _resolve(api, "models/", args.model, "model")
    body["dataset"] = _resolve(api, "datasets/", args.dataset, "dataset")
    for flag, key in (("trials", "max_trials"), ("parallel", "max_parallel"),
                      ("max_time", "max_time")):  # fmt: skip
        if getattr(args, flag) is not None:
            body[key] = getattr(args, flag)
    sweep = api.call("POST", "sweeps/", body)
    show(
        args,
        sweep,
        f"sweep {sweep['id']} {sweep['state']}: {sweep['name']} "
        f"({sweep['max_trials']} trials, {sweep['max_parallel']} at a time)",
    )


def _sweep_row(sweep: dict[str, Any]) -> dict[str, Any]:
    progress, best = sweep["progress"], sweep["best"]
    arrow = "min" if sweep["direction"] == "minimize" else "max"
    shown = f"{progress['done']}/{progress['total']}"
    if progress["running"]:
        shown += f" ({progress['running']} running)"
    return {**sweep, "objective_shown": f"{arrow} {sweep['objective']}",
            "progress_shown": shown,
            "best_shown": "-" if best is None else f"{best['objective']:.4g} (trial "
                                                  f"{best['number']})"}  # fmt: skip


def sweeps_list(args: argparse.Namespace, api: Client) -> None:
    rows = list(api.pages("sweeps/", {"state": getattr(args, "state", None)}))
    show(args, rows, lambda r: table([_sweep_row(s) for s in r], SWEEP_COLUMNS))


def _describe_sweep(sweep: dict[str, Any]) -> None:
    row = _sweep_row(sweep)
    progress, best = sweep["progress"], sweep["best"]
    row["trials"] = (f"{progress['done']}/{progress['total']} ended: {progress['completed']} "
                     f"completed, {progress['pruned']} pruned, {progress['failed']} failed; "
                     f"{progress['running']} running")  # fmt: skip
    row["objective"] = row["objective_shown"]
    if best is not None:
        values = ", ".join(f"{k}={_value(v)}" for k, v in best["hparams"].items())
        row["best"] = (f"trial {best['number']} (job {best['job']}): {sweep['objective']} "
                       f"{best['objective']:.6g} with {values}")  # fmt: skip
    row["elapsed"] = f"{sweep['elapsed_seconds']:.0f} s"
    if sweep["time_left_seconds"] is not None:
        row["time_left"] = f"{sweep['time_left_seconds']:.0f} s"
    row["budget"] = f"{sweep['max_trials']} trials, {sweep['max_parallel']} at a time, " \
                    f"{sweep['max_workers']} slot(s) each at most"  # fmt: skip
    fields(row, ["id", "name", "owner", "state", "algorithm", "objective", "budget", "trials",
                 "best", "elapsed", "time_left", "error"])  # fmt: skip
    names = list(sweep["space"])
    trials = [{**t, **{f"hp.{k}": _value(v) for k, v in t["hparams"].items()},
               "step": t["objective_step"]} for t in sweep["trials"]]  # fmt: skip
    if trials:
        print()
        columns = [
            ("number", "trial"),
            ("job", "job"),
            ("state", "job state"),
            ("trial_state", "trial"),
            *((f"hp.{n}", n) for n in names),
            ("objective", sweep["objective"]),
            ("step", "at step"),
            ("note", "note"),
        ]
        table(trials, columns)


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def sweeps_show(args: argparse.Namespace, api: Client) -> None:
    show(args, api.call("GET", f"sweeps/{args.id}/"), _describe_sweep)


def sweep_stop(args: argparse.Namespace, api: Client) -> None:
    sweep = api.call("POST", f"sweeps/{args.id}/stop/")
    show(args, sweep, f"sweep {sweep['id']} {sweep['state']}")


def sweep_resume(args: argparse.Namespace, api: Client) -> None:
    sweep = api.call("POST", f"sweeps/{args.id}/resume/")
    show(args, sweep, f"sweep {sweep['id']} {sweep['state']}")


def sweep_clone(args: argparse.Namespace, api: Client) -> None:
    sweep = api.call("POST", f"sweeps/{args.id}/clone/", {"name": args.name or ""})
    show(args, sweep, f"sweep {sweep['id']} {sweep['state']}: {sweep['name']}")


def compare(args: argparse.Namespace, api: Client) -> None:
    """Jobs side by side: a row per configuration key (``*`` where they differ), then their
    final metrics."""
    found = api.call("GET", "jobs/compare/", query={"ids": ",".join(map(str, args.jobs))})

    def human(result: dict[str, Any]) -> None:
        jobs, differs = result["jobs"], set(result["differs"])
        columns = [("key", ""), *((str(j["id"]), f"job {j['id']}") for j in jobs)]
        rows = [{"key": "name", **{str(j["id"]): j["name"] for j in jobs}},
                {"key": "state", **{str(j["id"]): j["state"] for j in jobs}}]  # fmt: skip
        for key in result["config_keys"]:
            mark = "* " if key in differs else "  "
            rows.append(
                {
                    "key": mark + key,
                    **{str(j["id"]): _shown(j["config"].get(key, "-")) for j in jobs},
                }
            )
        for key in result["final_keys"]:
            rows.append({"key": "= " + key,
                         **{str(j["id"]): _shown(j["final"].get(key)) for j in jobs}})  # fmt: skip
        table(rows, columns)
        print("\n* differs between the jobs; = final")

    show(args, found, human)


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    return _value(value)
