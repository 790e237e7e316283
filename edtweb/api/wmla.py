"""The part of IBM WMLA's Deep Learning REST API that its tutorials and ``dlicmd`` call,
under /platform/rest/deeplearning/v1/, mapped onto EDT jobs, so that notebooks move over
with a new URL and nothing else.

An *exec* is an EDT job. ``POST execs`` takes the model folder as a multipart archive
(field ``file``) and an ``args`` string (query or form field, or form field ``data`` holding
``{"args": ...}``), e.g. ``--exec-start edtPyTorch --model-main main.py --edt-options
maxWorkers=4 --epochs 5 --cs-datastore-meta type=fs,data_path=cifar10`` where ``data_path``
names one of the user's EDT datasets. HTTP basic authentication, as the notebooks send it.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import shlex
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import authentication, generics, renderers
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb import jsonbounds
from edtweb.api import serializers as s
from edtweb.api.auth import ThrottledBasicAuthentication
from edtweb.api.common import CappedUploadView, Owned, scoped
from edtweb.api.errors import ApiError, unknown_endpoint
from edtweb.datasets import roots
from edtweb.datasets.models import Dataset
from edtweb.ownership import OWN, STEER
from edtweb.registry import services as registry
from edtweb.registry.models import ModelDefinition
from edtweb.tenancy import services as tenancy
from edtweb.tenancy.models import Team
from edtweb.training import history, services
from edtweb.training.models import Job
from edtweb.training.status import JobStatus, status_of, statuses

TAGS = ["wmla"]
FRAMEWORKS = ("edtPyTorch", "PyTorch")
STATES = {
    Job.State.QUEUED: "SUBMITTED",
    Job.State.RUNNING: "RUNNING",
    Job.State.SUSPENDED: "PENDING_JOB_SCHEDULER",
    Job.State.COMPLETED: "FINISHED",
    Job.State.FAILED: "ERROR",
    Job.State.STOPPED: "KILLED",
}
EDT_OPTIONS = {"maxWorkers": "max_workers", "minWorkers": "min_workers", "priority": "priority",
               "batchMin": "batch_min", "batchMax": "batch_max"}  # fmt: skip
LOG_TAIL_BYTES = 4 * 1024 * 1024
NOT_FOUND = {404: s.problem("no such exec, or not yours")}


class AnyRenderer(renderers.BaseRenderer):
    """Lets a client that asks for ``application/octet-stream`` (WMLA's notebooks do, for
    results and logs) have the file; an error still answers as JSON."""

    media_type = "*/*"
    format = "bin"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> bytes:
        return data if isinstance(data, bytes) else json.dumps(data).encode()


class WmlaView(generics.GenericAPIView):
    authentication_classes = [
        ThrottledBasicAuthentication,
        authentication.TokenAuthentication,
        authentication.SessionAuthentication,
    ]
    renderer_classes = [renderers.JSONRenderer, AnyRenderer]


# The args string ---------------------------------------------------------------------------


@dataclass
class WmlaArgs:
    framework: str
    model_main: str
    data_path: str
    fields: dict[str, Any]
    ignored: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # what the script gets (README, "Models")


# The submission's own options: they mean something to the platform, not to the script
PLATFORM_OPTIONS = ("--exec-start", "--model-main", "--model-dir", "--cs-datastore-meta",
                    "--edt-options", "--ig", "--rest-host", "--rest-port")  # fmt: skip


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # a 400, never an exit
        raise ApiError(f"args: {message}", 400)


def parse_args(text: str) -> WmlaArgs:
    """The submission that ``text`` describes; options EDT has no use for are listed in
    ``ignored`` (they go on the job's timeline), never silently dropped."""
    parser = _Parser(prog="args", add_help=False, allow_abbrev=False)
    parser.add_argument("--exec-start", required=True)
    parser.add_argument("--model-main", required=True)
    parser.add_argument("--cs-datastore-meta", required=True)
    parser.add_argument("--edt-options", default="")
    parser.add_argument("--model-dir", default="")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", "--train-batch-size", dest="batch_size", type=int)
    parser.add_argument("--lr", "--learning-rate", dest="lr", type=float)
    parser.add_argument("--numWorker", type=int)
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ApiError(f"args: {exc}", 400) from None
    known, rest = parser.parse_known_args(words)
    if known.exec_start not in FRAMEWORKS:
        raise ApiError(f"args: --exec-start {known.exec_start}: use one of {FRAMEWORKS}", 400)
    store = _pairs(known.cs_datastore_meta, "--cs-datastore-meta")
    if store.get("type", "fs") != "fs" or not store.get("data_path"):
        raise ApiError("args: --cs-datastore-meta must be type=fs,data_path=<dataset name>", 400)
    fields = {k: v for k, v in vars(known).items() if k in ("epochs", "batch_size", "lr")}
    fields = {k: v for k, v in fields.items() if v is not None}
    if known.numWorker:
        fields["max_workers"] = known.numWorker
    ignored = list(rest)
    for key, value in _pairs(known.edt_options, "--edt-options").items():
        if key not in EDT_OPTIONS:
            ignored.append(f"--edt-options {key}={value}")
            continue
        try:
            fields[EDT_OPTIONS[key]] = int(value)
        except ValueError:
            raise ApiError(f"args: --edt-options {key}={value}: not a whole number", 400) from None
    return WmlaArgs(known.exec_start, known.model_main, store["data_path"], fields, ignored,
                    script_argv(words))  # fmt: skip


def script_argv(words: list[str]) -> list[str]:
    """The args string less the platform's own options (and their values)."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in PLATFORM_OPTIONS:
            skip = "=" not in word
            continue
        out.append(word)
    return out


def _pairs(text: str, option: str) -> dict[str, str]:
    out = {}
    for item in text.replace(" ", ",").split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ApiError(f"args: {option} takes key=value pairs, not {item!r}", 400)
        out[key.strip()] = value.strip()
    return out


# Views -----------------------------------------------------------------------------------


class Frameworks(WmlaView):
    @extend_schema(tags=TAGS, responses={200: s.WmlaFrameworkSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """The frameworks ``--exec-start`` accepts: both run PyTorch under EDT."""
        version = metadata.version("torch")
        desc = ["Elastic distributed training on EDT: native or WMLA-style (FabricModel)"]
        offered = [{"name": n, "frameworkVersion": version, "desc": desc} for n in FRAMEWORKS]
        return Response(offered)


class Execs(CappedUploadView, WmlaView):
    parser_classes = [MultiPartParser]

    def upload_limit(self) -> int:
        return registry.MAX_MODEL_BYTES

    @extend_schema(tags=TAGS, responses={200: s.WmlaExecSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """Your execs (EDT jobs), newest first."""
        jobs = list(scoped(request, Job).select_related("owner"))
        live = statuses(jobs, request.user)
        return Response([as_exec(j, live[j.pk]) for j in jobs])

    @extend_schema(
        tags=TAGS,
        parameters=[
            OpenApiParameter("args", str, description="the WMLA args string"),
            OpenApiParameter("sigName", str, description="a team of yours of that name, if any"),
        ],
        request={"multipart/form-data": s.WmlaSubmitSerializer},
        responses={
            200: s.WmlaSubmittedSerializer,
            400: s.problem("bad args, archive or model; `error` says which"),
            413: s.problem("archive over 50 MiB"),
        },
    )
    def post(self, request: Request) -> Response:
        """Submit a training: the model folder as an archive, the args string; answers
        the exec (its ``id``) at once. The model is checked in the background while the
        exec waits (``SUBMITTED``, ``modelCheck`` CHECKING); a broken model ends the exec
        ``ERROR`` with the check's error and line."""
        data, upload = self.uploaded_file()
        text = _args_text(request, data)
        wmla = parse_args(text)
        dataset = _dataset_named(request, wmla.data_path)
        form = s.JobSubmitSerializer(data={"model": 0, "dataset": dataset.pk, **wmla.fields})
        form.is_valid(raise_exception=True)  # the Train form's fields and defaults
        submission = s.judged(form.validated_data, dataset)  # and its rules
        team, group = _team_of(request, data)
        model = _stored_model(request, upload, wmla.model_main)
        decides = [f for f in ("epochs", "batch_size", "lr") if f not in wmla.fields]
        try:
            job = services.submit_from_form(
                request.user,
                {"name": f"{model.entry} ({wmla.framework})", "model": model,
                 "dataset": dataset, "submission": submission, "team": team,
                 "resource_group": group},
                spec_extra={"argv": wmla.argv, "script_decides": decides},
            )  # fmt: skip
        except DjangoValidationError as exc:
            registry.delete(model)
            raise ApiError(f"args: {'; '.join(exc.messages)}") from None
        except Exception:
            registry.delete(model)
            raise
        services.record_event(job.pk, "wmla", "submitted through the WMLA API", args=text,
                              framework=wmla.framework, ignored=wmla.ignored)  # fmt: skip
        registry.start_check(model)  # in the background; the job waits for it
        return Response({**as_exec(job, status_of(job, request.user)), "ignored": wmla.ignored})


def _team_of(request: Request, data: Any) -> tuple[Team | None, str]:
    """The exec's team: the one its ``sigName`` (WMLA's instance group; query or form
    field) names when it is a team the user may use, else the user's default team (a team
    of another's is as one that does not exist); and that team's resource group."""
    sig = request.query_params.get("sigName") or data.get("sigName") or ""
    try:
        return tenancy.placement(request.user, tenancy.sig_team(request.user, sig))
    except DjangoValidationError as exc:
        raise ApiError(f"sigName: {'; '.join(exc.messages)}") from None


def _stored_model(request: Request, upload: Any, model_main: str) -> ModelDefinition:
    """The uploaded model folder, extracted by the safe extractor (nothing is listed or
    decompressed before it has checked the archive), as a model definition to check."""
    content = upload.read()
    name = str(upload.name)
    if name.endswith(".py") and posixpath.basename(name) != posixpath.basename(model_main):
        raise ApiError(f"args: --model-main {model_main} is not the file sent ({name})")
    entry = "" if name.endswith(".py") else posixpath.normpath(model_main)
    try:
        return registry.create(request.user, f"WMLA exec: {model_main}", name, content, entry,
                               check_async=None)  # fmt: skip
    except registry.ModelUploadError as exc:
        raise ApiError(f"file: {exc} (--model-main {model_main})") from None


def _args_text(request: Request, data: Any) -> str:
    text = request.query_params.get("args") or data.get("args") or ""
    if not text and data.get("data"):
        try:
            text = str(jsonbounds.loads(data["data"], "data").get("args", ""))
        except jsonbounds.Refused:
            raise
        except (ValueError, AttributeError):
            raise ApiError('data: send JSON such as {"args": "--exec-start ..."}') from None
    if not text.strip():
        raise ApiError("args: send the WMLA args string (query or form field 'args')")
    return str(text)


def _dataset_named(request: Request, name: str) -> Dataset:
    """The user's READY dataset of that name, or, as WMLA resolves ``data_path`` under its
    data store, the one registered in place at that path under a data root (absolute, or
    relative to a root: docs/architecture.md, "Datasets in place")."""
    mine = scoped(request, Dataset).filter(owner=request.user)
    found = mine.filter(name=name, status=Dataset.Status.READY).order_by("-created_at").first()
    if found is None and roots.roots():
        found = _dataset_at(mine, name)
    if found is None:
        names = ", ".join(sorted({d.name for d in mine})) or "none yet"
        raise ApiError(
            f"args: --cs-datastore-meta data_path={name}: no READY dataset of yours has that "
            f"name (yours: {names}); upload it with `edt datasets upload`"
        )
    return found


def _dataset_at(mine: Any, given: str) -> Dataset | None:
    """The user's READY dataset in place at ``given`` (None when the path is fine but no
    dataset of theirs is there); a path that escapes its root, or none, is a 400."""
    known = roots.roots()
    if "/" not in given and given != ".." and not any((r.path / given).exists() for r in known):
        return None  # a plain name that names no folder either: the caller's message
    try:
        _root, path = roots.resolve(given, known)
    except roots.PathRefused as exc:
        raise ApiError(f"args: --cs-datastore-meta data_path={given}: {exc}") from None
    found = mine.filter(source=str(path), status=Dataset.Status.READY)
    result: Dataset | None = found.order_by("-created_at").first()
    if result is None:
        raise ApiError(
            f"args: --cs-datastore-meta data_path={given}: no READY dataset of yours is "
            f"registered at {path}; register it with `edt datasets add --path {given} --name NAME`"
        )
    return result


class ExecDetail(Owned, WmlaView):
    model = Job
    noun = "exec"

    @extend_schema(tags=TAGS, responses={200: s.WmlaExecSerializer, **NOT_FOUND})
    def get(self, request: Request, pk: int) -> Response:
        """The exec: ``state`` is WMLA's (FINISHED, ERROR, KILLED when it ended)."""
        job = self.get_object()
        return Response(as_exec(job, status_of(job, request.user)))

    @extend_schema(
        tags=TAGS,
        request=None,
        parameters=[OpenApiParameter("action", str, enum=["stop"], required=True)],
        responses={200: s.WmlaExecSerializer, 400: s.problem("not ?action=stop"), **NOT_FOUND},
    )
    def put(self, request: Request, pk: int) -> Response:
        """``?action=stop``: stop the exec (as ``POST execs/{id}/stop``)."""
        job = self.get_object(STEER)
        if request.query_params.get("action") != "stop":
            raise ApiError("action: the only action is 'stop' (PUT execs/{id}?action=stop)")
        services.stop_job(job.pk)
        job.refresh_from_db()
        return Response(as_exec(job, status_of(job, request.user)))

    @extend_schema(
        tags=TAGS,
        responses={200: s.WmlaExecSerializer, 409: s.problem("still active"), **NOT_FOUND},
    )
    def delete(self, request: Request, pk: int) -> Response:
        """Delete an exec that has ended, with its logs, checkpoints and model (its owner
        and staff may)."""
        job = self.get_object(OWN)
        gone = as_exec(job, status_of(job, request.user))
        if not services.delete_job(job.pk):  # refuses an active job
            raise ApiError(f"exec {job.pk} is {STATES[job.state]}: stop it first", 409)
        return Response(gone)


class ExecStop(Owned, WmlaView):
    model = Job
    noun = "exec"

    @extend_schema(tags=TAGS, request=None, responses={200: s.WmlaExecSerializer, **NOT_FOUND})
    def post(self, request: Request, pk: int) -> Response:
        """Stop the exec: its learners checkpoint and exit (state KILLED). Its owner, the
        leads of its team and staff may."""
        job = self.get_object(STEER)
        services.stop_job(job.pk)
        job.refresh_from_db()
        return Response(as_exec(job, status_of(job, request.user)))


class ExecLog(Owned, WmlaView):
    model = Job
    noun = "exec"

    @extend_schema(
        tags=TAGS,
        parameters=[
            OpenApiParameter(
                "logType",
                str,
                enum=["outlog", "errlog"],
                description=(
                    "outlog (the default): the driver's output, what the script's ELog writes "
                    "to $LOG_DIR/stdout; errlog: every learner's output"
                ),
            ),
        ],
        responses={200: OpenApiTypes.STR, 400: s.problem("unknown logType"), **NOT_FOUND},
    )
    def get(self, request: Request, pk: int) -> JsonResponse:
        """The exec's log as one JSON string, as WMLA answers it: ``outlog`` is the driver's
        output ($LOG_DIR/stdout of a WMLA script; every learner's output when the script
        writes none), ``errlog`` every learner's output, one section per slot (the last
        4 MiB of each)."""
        job = self.get_object()
        kind = request.query_params.get("logType", "outlog")
        if kind not in ("outlog", "errlog"):
            raise ApiError(f"logType: {kind!r}: use outlog or errlog")
        return JsonResponse(exec_log(job, kind), safe=False)


def exec_log(job: Job, kind: str) -> str:
    """``outlog``: the driver's output ($LOG_DIR/stdout), else every learner's; ``errlog``:
    every learner's output, a section per slot (the last 4 MiB of each)."""
    driver = job.workdir / "driver" / "stdout"
    if kind == "outlog" and driver.is_file():
        with driver.open("rb") as f:
            f.seek(max(0, driver.stat().st_size - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    parts = []
    for slot in history.log_names(job):
        text = history.log_tail(job, slot, -LOG_TAIL_BYTES, LOG_TAIL_BYTES)["text"]
        parts.append(f"==== learner {slot} ====\n{text}")
    return "\n".join(parts)


class ExecResult(Owned, WmlaView):
    model = Job
    noun = "exec"

    @extend_schema(
        tags=TAGS,
        responses={(200, "application/zip"): OpenApiTypes.BINARY, **NOT_FOUND},
    )
    def get(self, request: Request, pk: int) -> FileResponse:
        """The result as a zip: the final model, ``model.pt`` (load it with
        ``torch.load(path, weights_only=True)``), and what a WMLA script saved under
        ``$RESULT_DIR``, under ``result/``."""
        job = self.get_object()
        path = history.downloadable(job, "model.pt")
        if path is None:
            raise ApiError(f"exec {job.pk} has no result: it is {STATES[job.state]}", 404)
        out = tempfile.TemporaryFile()  # noqa: SIM115 (FileResponse closes it)
        result = job.workdir / "result"
        with zipfile.ZipFile(out, "w") as z:
            z.write(path, "model.pt")
            for file in sorted(result.rglob("*")) if result.is_dir() else []:
                if file.is_file() and not file.is_symlink():
                    z.write(file, f"result/{file.relative_to(result)}")
        out.seek(0)
        name = f"exec-{job.pk}-result.zip"
        return FileResponse(out, as_attachment=True, filename=name, content_type="application/zip")


def as_exec(job: Job, status: JobStatus) -> dict[str, Any]:
    """The job as a WMLA exec; its workers and progress are ``status``'s (the pages' too)."""
    wmla = job.events.filter(kind="wmla").first()
    model = job.model_definition
    checking = model is not None and model.status == ModelDefinition.Status.CHECKING
    return {
        "id": str(job.pk),
        "submissionId": str(job.pk),
        "sigId": status.team or "edt",  # the instance group: its team, if it has one
        "appId": f"edt-job-{job.pk}",
        "name": job.name,
        "appName": job.name,
        "framework": wmla.data.get("framework", FRAMEWORKS[0]) if wmla else FRAMEWORKS[0],
        "creator": job.owner.get_username(),
        "state": STATES[job.state],
        "edtState": job.state,
        "elastic": True,
        "numWorker": status.workers,
        "maxWorkers": job.max_workers,
        "priority": job.priority,
        "createTime": _utc(job.created_at),
        "startTime": _utc(job.started_at),
        "endTime": _utc(job.finished_at),
        "progress": status.progress,
        "error": job.error,
        "queuePosition": status.position,  # the scheduler's own (training/standing.py)
        "schedulerReason": status.reason,
        "args": wmla.data.get("args", "") if wmla else "",
        "modelCheck": {
            "status": model.status if model else "",
            "progress": registry.check_progress(model) if checking and model else None,
        },
    }


def _utc(moment: Any) -> str | None:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


@csrf_exempt
def slash_tolerant(request: HttpRequest, rest: str = "") -> HttpResponse:
    """WMLA clients write both ``execs`` and ``execs/``: a trailing slash is ignored."""
    path = request.path_info
    if path.endswith("/"):
        try:
            match = resolve(path.rstrip("/"))
        except Resolver404:
            match = None
        if match is not None and match.func is not slash_tolerant:
            return match.func(request, *match.args, **match.kwargs)
    return unknown_endpoint(request)


# Spectrum Conductor: the few calls of /platform/rest/conductor/v1/ that WMLA's EDT notebooks
# make around the execs (log on, running applications, the driver's logs). One instance
# group: "edt".


class ConductorLogon(WmlaView):
    @extend_schema(tags=TAGS, responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        """Check the credentials (basic authentication), as ``auth/logon`` does."""
        return Response({"userName": request.user.get_username(), "sigName": "edt"})


class ConductorApplications(WmlaView):
    @extend_schema(
        tags=TAGS,
        parameters=[OpenApiParameter("state", str, description="a WMLA state, e.g. RUNNING")],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, sig: str) -> Response:
        """Your execs as the instance group's applications (``state`` filters them)."""
        wanted = request.query_params.get("state")
        apps = []
        jobs = list(scoped(request, Job).filter(owner=request.user))
        live = statuses(jobs, request.user)
        for job in jobs:
            state = STATES[job.state]
            if wanted and state != wanted:
                continue
            ran = (job.finished_at or timezone.now()) - job.started_at if job.started_at else None
            apps.append({
                "id": f"edt-job-{job.pk}", "name": job.name,
                "driver": {"id": str(job.pk), "state": state},
                "apprunduration": ran.total_seconds() / 60 if ran else 0.0,
                "gpuslots": live[job.pk].workers, "gpumemused": {"total": 0},
                "gpudevutil": {"total": 0}, "executors": [],
            })  # fmt: skip
        return Response(apps)


class ConductorDriverLog(Owned, WmlaView):
    model = Job
    noun = "exec"

    @extend_schema(tags=TAGS, responses={(200, "text/plain"): OpenApiTypes.STR, **NOT_FOUND})
    def get(self, request: Request, sig: str, pk: int, stream: str) -> HttpResponse:
        """The driver's ``stdout`` (the script's ELog output) or ``stderr`` (every
        learner's output), as a file."""
        self.kwargs["pk"] = pk
        job = self.get_object()
        text = exec_log(job, "outlog" if stream == "stdout" else "errlog")
        return HttpResponse(text, content_type="application/octet-stream")
