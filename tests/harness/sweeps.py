"""What the sweeps' in-process tests start from: a study storage of the test's own, and a
user's READY dataset and VALID model to sweep over."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.sweeps import study
from tests.harness.processes import PROJECT_DIR


@contextmanager
def own_storage(tmp_path: Path, settings: Any) -> Iterator[None]:
    """A study storage of the test's own; a driver made after ``restart`` opens it afresh."""
    settings.EDT_SWEEP_STORAGE = f"sqlite:///{tmp_path / 'sweeps.sqlite3'}"
    study.storage.cache_clear()
    try:
        yield
    finally:
        study.storage.cache_clear()


def sweep_inputs(owner: Any) -> dict[str, Any]:
    """``owner``'s READY dataset ``shapes`` (256 training samples) and VALID model ``mlp``."""
    dataset = Dataset.objects.create(
        owner=owner, name="shapes", status=Dataset.Status.READY, format="cifar10",
        summary={"splits": {"train": {"count": 256}, "test": {"count": 64}}},
    )  # fmt: skip
    model = ModelDefinition.objects.create(owner=owner, name="mlp", entry="mlp.py",
                                           style="native", status="VALID")  # fmt: skip
    model.entry_path.parent.mkdir(parents=True, exist_ok=True)
    model.entry_path.write_bytes((PROJECT_DIR / "examples" / "mlp.py").read_bytes())
    return {"owner": owner, "model": model, "dataset": dataset}
