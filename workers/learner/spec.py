"""What a learner is asked to do: the job's training values, as a JSON file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

PRECISIONS = ("fp32", "bf16", "fp16")  # training precision, a job option


@dataclass
class JobSpec:
    job_id: str
    model: str  # path of the user's .py file
    data: str  # dataset directory
    workdir: str  # checkpoints/, logs/, model.pt
    batch_size: int = 64  # the global (effective) batch B
    max_micro_batch: int = 0  # 0: no cap
    epochs: int = 1
    lr: float = 0.01
    seed: int = 0
    checkpoint_every: int = 1  # epochs
    collective_timeout: float = 30.0  # seconds
    max_steps: int = 0  # stop after this many global steps (0: train every epoch)
    bucket_bytes: int = 0  # gradient all-reduce bucket cap (0: DDP's 1 MiB first, then 25 MiB)
    precision: str = "fp32"  # fp32, bf16 (autocast, CPU or GPU) or fp16 (GPU, gradient scaler)
    # A WMLA script: its argv, the fields whose value is the script's own (those its exec did
    # not set: "epochs", "batch_size", "lr"), the job's id as WMLA names it (DLI_EXECID)
    argv: list[str] = field(default_factory=list)
    script_decides: list[str] = field(default_factory=list)
    exec_id: str = ""

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch size must be at least 1, not {self.batch_size}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be at least 1, not {self.epochs}")
        if self.precision not in PRECISIONS:
            choices = ", ".join(PRECISIONS)
            raise ValueError(f"precision must be one of {choices}, not {self.precision!r}")
        if self.collective_timeout <= 0:
            raise ValueError("the collective timeout must be positive")

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> JobSpec:
        raw: dict[str, Any] = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})
