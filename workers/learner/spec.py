"""What a learner is asked to do: the job's training values, as a JSON file, built from a
validated :class:`~workers.learner.submission.Submission` (:meth:`JobSpec.of`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from workers.learner.submission import DEFAULTS, Submission


@dataclass
class JobSpec:
    job_id: str
    model: str  # path of the user's .py file
    data: str  # dataset directory
    workdir: str  # checkpoints/, logs/, model.pt
    # the global (effective) batch B; in goodput mode the base batch M0: the batch the
    # learning rate is given for, and the first generation's
    batch_size: int = DEFAULTS["batch_size"]
    max_micro_batch: int = DEFAULTS["max_micro_batch"]  # 0: no cap
    # Goodput mode's global batch range (both 0: the batch is fixed at batch_size)
    batch_min: int = DEFAULTS["batch_min"]
    batch_max: int = DEFAULTS["batch_max"]
    epochs: int = DEFAULTS["epochs"]
    lr: float = DEFAULTS["lr"]
    seed: int = 0
    checkpoint_every: int = DEFAULTS["checkpoint_every"]  # epochs
    collective_timeout: float = 30.0  # seconds
    max_steps: int = 0  # stop after this many global steps (0: train every epoch)
    bucket_bytes: int = 0  # gradient all-reduce bucket cap (0: DDP's 1 MiB first, then 25 MiB)
    # fp32, bf16 (autocast, CPU or GPU) or fp16 (GPU, gradient scaler)
    precision: str = DEFAULTS["precision"]
    # The input pipeline (docs/architecture.md, "Input pipeline")
    image_size: int = DEFAULTS["image_size"]  # an image folder's side (0: the first image's)
    loader_workers: int = DEFAULTS["loader_workers"]  # per learner (0: the slot's share)
    augment: int = DEFAULTS["augment"]  # 1: random crop, flip, normalisation
    # A WMLA script: its argv, the fields whose value is the script's own (those its exec did
    # not set: "epochs", "batch_size", "lr"), the job's id as WMLA names it (DLI_EXECID)
    argv: list[str] = field(default_factory=list)
    script_decides: list[str] = field(default_factory=list)
    exec_id: str = ""
    # A sweep's trial: its hyperparameters, name -> value (docs/architecture.md, "Model
    # definition contract"); empty for a plain job
    hparams: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, submission: Submission, **rest: Any) -> JobSpec:
        """The spec of a validated submission: its training values, and ``rest`` (where
        the job lives, and what no submission chooses: seed, timeout, a script's argv)."""
        mine = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in submission.values().items() if k in mine}, **rest)

    @property
    def goodput(self) -> bool:
        """Goodput mode (docs/architecture.md, "Goodput mode"): the global batch moves
        within ``batch_min``..``batch_max`` as the scheduler decides."""
        return self.batch_max > 0

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> JobSpec:
        raw: dict[str, Any] = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})
