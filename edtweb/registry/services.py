"""Model definitions: store the uploaded code, then check it with a time limit in a
background job (``manage.py edt_check_model``, as datasets are prepared) whose child runs
the user's code: never in the web process, never lost to a restart of the web."""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections
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
RESTARTS = 2  # an interrupted check is started again this many times, then failed
STARTING = 30  # seconds a new model may wait for its check to start


def start_check(model: ModelDefinition, data: Path | None = None, wait: bool = False) -> None:
    """Check the model: in a detached ``manage.py edt_check_model`` (it outlives a restart
    of the web), or here when ``wait`` (at install, for the examples). Either way the user's
    code runs in validate's sandboxed child, never in this process."""
    if wait:
        run_check(model.pk, data)
        return
    model.root.mkdir(parents=True, exist_ok=True)
    with (model.root / "check.log").open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "edt_check_model", str(model.pk)],
            cwd=settings.BASE_DIR,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    _write_pid_file(model.pk, f"{proc.pid} {time.time()} command")
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped, never a zombie


def _pid_file(model_pk: int) -> Path:
    return Path(settings.EDT_DATA_DIR) / "models" / str(model_pk) / "check.pid"


def _write_pid_file(model_pk: int, text: str) -> None:
    """Replace the pid file whole: a reader (any page's look for dead checkers) never sees
    it empty or half written, which it would take for a checker gone, and start another."""
    path = _pid_file(model_pk)
    part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
    part.write_text(text)
    os.replace(part, path)


def run_check(model_pk: int, data: Path | None = None) -> None:
    """The check itself (what ``edt_check_model`` runs): the model ends VALID or INVALID;
    a job waiting for it is woken or failed with the check's error."""
    from workers.learner.validate import validate

    pid_file = _pid_file(model_pk)
    if not pid_file.parent.exists():
        return
    command = "edt_check_model" in " ".join(sys.argv)
    _write_pid_file(model_pk, f"{os.getpid()} {time.time()} {'command' if command else 'here'}")
    close_old_connections()
    try:
        model = ModelDefinition.objects.get(pk=model_pk)
        result = validate(model.entry_path, data=data, timeout=CHECK_TIMEOUT)
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
    finally:
        checker = _checker_of(model_pk)
        if checker and checker[0] == os.getpid():  # not a checker started in its place
            pid_file.unlink(missing_ok=True)
    _after_check(model_pk)
    close_old_connections()


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
    """A check in progress: seconds since it started and its limit (None: not checking)."""
    if model.status != ModelDefinition.Status.CHECKING:
        return None
    checker = _checker_of(model.pk)
    started = checker[1] if checker else model.created_at.timestamp()
    return {"seconds": max(0.0, time.time() - started), "limit": CHECK_TIMEOUT}


def recover_stale_checks() -> None:
    """Models left CHECKING by a checker that is gone (the host restarted, it was killed):
    checked again, or after RESTARTS tries failed with a message that says so."""
    fresh = timezone.now() - datetime.timedelta(seconds=STARTING)
    for model in ModelDefinition.objects.filter(status=ModelDefinition.Status.CHECKING):
        if _checker_alive(model.pk):
            continue
        if not _pid_file(model.pk).exists() and model.created_at > fresh:
            continue  # just uploaded: its check is being started
        restarts = model.root / "check.restarts"
        tries = int(restarts.read_text() or 0) if restarts.exists() else 0
        if tries >= RESTARTS:
            ModelDefinition.objects.filter(pk=model.pk, status="CHECKING").update(
                status=ModelDefinition.Status.INVALID,
                error=f"the model check was interrupted {tries + 1} times (the platform "
                "restarted or the check was killed); upload the model again",
            )
            _after_check(model.pk)
            continue
        log.warning("model %s: its check is gone; checking it again", model.pk)
        restarts.write_text(str(tries + 1))
        start_check(model)


def _checker_of(model_pk: int) -> tuple[int, float, str] | None:
    """What the pid file says: the checker's pid, when it started and how it runs."""
    try:
        pid, started, how = _pid_file(model_pk).read_text().split()[:3]
        return int(pid), float(started), how
    except (OSError, ValueError):  # no file, or not three fields
        return None


def _checker_alive(model_pk: int) -> bool:
    """The process named in the pid file still runs the model's check: the detached
    command, or a platform process that runs it itself (``wait``)."""
    checker = _checker_of(model_pk)
    if checker is None:
        return False
    pid, _started, how = checker
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):  # exited, not yet reaped
        return False
    return how == "here" or b"edt_check_model" in cmdline


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
