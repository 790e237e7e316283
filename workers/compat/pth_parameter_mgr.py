"""WMLA's parameter manager: the job's values as set in EDT (data, optimizer, epochs)."""

from __future__ import annotations

import os
from typing import Any

import torch


def getTrainData(_flag: bool = False) -> str:
    return os.environ.get("EDT_JOB_DATA", "")


def getTestData(_flag: bool = False) -> str:
    return os.environ.get("EDT_JOB_DATA", "")


def getEpoch() -> int:
    return int(os.environ.get("EDT_JOB_EPOCHS", "1"))


def getTrainBatchSize() -> int:
    return int(os.environ.get("EDT_JOB_BATCH", "64"))


def getLearningRate() -> float:
    return float(os.environ.get("EDT_JOB_LR", "0.01"))


def getOptimizer(model: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=getLearningRate(), momentum=0.9)
