"""Model definitions: store the uploaded code, then check it with a time limit on a worker
host's control worker (``manage.py edt_check_model``, as datasets are prepared) whose child
runs the user's code: never in the web process, never lost to a restart of the web."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from edtweb.registry.models import ModelDefinition

log = logging.getLogger("edt.models")
MAX_MODEL_BYTES = 50 * 1024 * 1024


class ModelUploadError(ValueError):
    """An upload the user must correct; the message says how."""


def create(
    owner: Any,
    name: str,
    upload_name: str,
    content: bytes,
    entry: str = "",
    check_async: bool | None = True,
) -> ModelDefinition:
    """Store a .py file (or an archive with ``entry`` inside) and start its check (in the
    background; here when ``check_async`` is False; not at all when None: the caller
    starts it)."""
    if not name.strip():
        raise ModelUploadError("give the model a name")
    if len(content) > MAX_MODEL_BYTES:
        raise ModelUploadError(f"model uploads are limited to {MAX_MODEL_BYTES // 2**20} MiB")
    is_py = upload_name.endswith(".py")
    model = ModelDefinition.objects.create(
        owner=owner, name=name.strip(), entry=Path(upload_name).name if is_py else entry
    )
    code = model.root / "code"
    try:
        # What a row that had this id before left (one rolled back: SQLite gives it again).
        shutil.rmtree(model.root, ignore_errors=True)
        code.mkdir(parents=True, exist_ok=True)
        if is_py:
            (code / model.entry).write_bytes(content)
        else:
            _unpack(model, upload_name, content)
    except Exception:
        shutil.rmtree(model.root, ignore_errors=True)
        model.delete()
        raise
    if check_async is not None:
        start_check(model, wait=not check_async)
    model.refresh_from_db()
    return model


def _unpack(model: ModelDefinition, upload_name: str, content: bytes) -> None:
    from edtweb.datasets.archive import ArchiveError, extract

    archive = model.root / "upload.part"
    archive.write_bytes(content)
    code = model.root / "code"
    code.rmdir()
    try:
        extract(archive, code)
    except ArchiveError as exc:
        raise ModelUploadError(str(exc)) from None
    finally:
        archive.unlink(missing_ok=True)
    candidates = sorted(str(p.relative_to(code)) for p in code.rglob("*.py"))
    entry = model.entry or _guess_entry(candidates)
    nested = [c for c in candidates if c.endswith("/" + entry)]
    if entry and entry not in candidates and len(nested) == 1:
        entry = nested[0]  # under the one folder WMLA's tutorials pack (the model's dir)
    if entry not in candidates:
        raise ModelUploadError(
            f"no entry module {entry!r} in {upload_name}; it holds: "
            f"{', '.join(candidates[:10]) or 'no .py file'}"
        )
    ModelDefinition.objects.filter(pk=model.pk).update(entry=entry)
    model.entry = entry


def _guess_entry(candidates: list[str]) -> str:
    for preferred in ("main.py", "model.py", "train.py"):
        if preferred in candidates:
            return preferred
    top = [c for c in candidates if "/" not in c]
    return top[0] if len(top) == 1 else ""


CHECK_TIMEOUT = 60.0  # seconds for loading, building and one batch (validate's limit)
# A WMLA hypersearch's model is checked with one point of its space as config.json, as each
# trial runs with its own (edtweb/api/wmla_hpo.py writes it before the check starts).
CHECK_CONFIG = "check-config.json"
TRIES = 2  # a check whose process died is run once more; the next loss fails the model
INTERRUPTED = (
    "the model check was interrupted twice (its worker died); upload again or ask an admin"
)


def start_check(model: ModelDefinition, data: Path | None = None, wait: bool = False) -> None:
    """Check the model: by a worker host's control worker (``manage.py edt_check_model``,
    workers/control.py), or here when ``wait`` (at install, for the examples). Either way the
    user's code runs in validate's sandboxed child, never in this process."""
    from edtweb.celery import queue_control
    from workers.control import CHECK_MODEL

    if wait:
        run_check(model.pk, data)
        return
    model.root.mkdir(parents=True, exist_ok=True)
    queue_control(CHECK_MODEL, model.pk, str(model.root / "check.log"),
                  lambda why: _fail_check(model.pk, f"the model check {why}"))  # fmt: skip


def run_check(model_pk: int, data: Path | None = None) -> None:
    """The check itself (what ``edt_check_model`` runs): the model ends VALID or INVALID;
    a job waiting for it is woken or failed with the check's error."""
    from workers.learner.validate import validate

    close_old_connections()
    if not _begin_check(model_pk):
        return
    try:
        model = ModelDefinition.objects.get(pk=model_pk)
        point = model.root / CHECK_CONFIG
        config = json.loads(point.read_text()) if point.is_file() else None
        result = validate(model.entry_path, data=data, timeout=CHECK_TIMEOUT, config=config)
        ModelDefinition.objects.filter(pk=model_pk).update(
            status=ModelDefinition.Status.VALID if result.ok else ModelDefinition.Status.INVALID,
            style=result.style,
            parameters=result.parameters,
            output_shape=result.output_shape,
            error=result.error,
            error_line=result.line,
            warnings=result.warnings,
        )
    except Exception as exc:
        log.exception("model %s: check failed", model_pk)
        ModelDefinition.objects.filter(pk=model_pk).update(
            status=ModelDefinition.Status.INVALID, error=f"the check itself failed: {exc}"
        )
    _after_check(model_pk)
    close_old_connections()


def _begin_check(model_pk: int) -> bool:
    """Count this start of the model's check (a claim: only a CHECKING model is checked).
    False when there is nothing to check, or when this start follows a second loss of the
    check's process: the model is then failed with a message that says so."""
    claimed = ModelDefinition.objects.filter(
        pk=model_pk, status=ModelDefinition.Status.CHECKING
    ).update(attempts=F("attempts") + 1, check_started=timezone.now())
    if claimed != 1:
        return False
    attempts = ModelDefinition.objects.get(pk=model_pk).attempts
    if attempts <= TRIES:
        if attempts > 1:
            log.warning("model %s: its check was interrupted; checking it again", model_pk)
        return True
    _fail_check(model_pk, INTERRUPTED)
    return False


def _fail_check(model_pk: int, message: str) -> None:
    ModelDefinition.objects.filter(pk=model_pk, status=ModelDefinition.Status.CHECKING).update(
        status=ModelDefinition.Status.INVALID, error=message
    )
    _after_check(model_pk)


def _after_check(model_pk: int) -> None:
    """Jobs submitted with the model while it was checked (WMLA execs): go, or fail."""
    from edtweb.training import services as training
    from edtweb.training.models import Job

    model = ModelDefinition.objects.filter(pk=model_pk).first()
    if model is None:
        return
    waiting = list(Job.objects.filter(model_definition=model, state=Job.State.QUEUED))
    for job in waiting:
        if model.status == ModelDefinition.Status.VALID:
            training.wake_scheduler(f"model {model_pk} checked")
        else:
            where = f" ({model.error_line})" if model.error_line else ""
            training.fail_job(job.pk, f"the model check failed: {model.error}{where}")


def check_progress(model: ModelDefinition) -> dict[str, Any] | None:
    """A check in progress: seconds since it started (or was asked for, while it waits for
    a control worker) and its limit (None: not checking)."""
    if model.status != ModelDefinition.Status.CHECKING:
        return None
    started = model.check_started or model.created_at
    return {"seconds": max(0.0, (timezone.now() - started).total_seconds()), "limit": CHECK_TIMEOUT}


def create_examples(owner: Any, examples: Path) -> list[ModelDefinition]:
    """The examples as ready-made models (a fresh install's Models page is not empty)."""
    made = []
    for name, file in (
        ("MLP (example)", "mlp.py"),
        ("CNN (example)", "cnn.py"),
        ("CNN, WMLA style (example)", "cnn_wmla.py"),
    ):
        made.append(create(owner, name, file, (examples / file).read_bytes(), check_async=False))
    return made


def delete(model: ModelDefinition) -> None:
    shutil.rmtree(model.root, ignore_errors=True)
    model.delete()
