"""Model definitions: store the uploaded code, then check it in a child process (user code
never runs in the web process) with a time limit."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from django.db import close_old_connections

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
    check_async: bool = True,
) -> ModelDefinition:
    """Store a .py file (or an archive with ``entry`` inside) and start its check."""
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


def start_check(model: ModelDefinition, data: Path | None = None, wait: bool = False) -> None:
    thread = threading.Thread(target=_check, args=(model.pk, data), daemon=True)
    thread.start()
    if wait:
        thread.join()


def _check(model_pk: int, data: Path | None) -> None:
    from workers.learner.validate import validate

    close_old_connections()
    try:
        model = ModelDefinition.objects.get(pk=model_pk)
        result = validate(model.entry_path, data=data)
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
        close_old_connections()


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
