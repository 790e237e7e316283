"""WMLA's ``FabricModel`` for scripts written for IBM's Elastic Distributed Training.

In an EDT learner, ``FabricModel(...).train(epochs, batch_size, max_workers)`` does not train
by itself: it hands the model, data, loss and optimizer to the elastic learner, which trains
them with the job's values (set in EDT, overriding the script's).
"""

from __future__ import annotations

import inspect
from typing import Any

from workers.learner.contract import ModelDefinition, constant_lr

_captured: ModelDefinition | None = None


def reset_capture() -> None:
    global _captured
    _captured = None


def captured() -> ModelDefinition | None:
    return _captured


class FabricModel:
    def __init__(
        self,
        model: Any,
        datasets_function: Any,
        loss_function: Any,
        optimizer: Any,
        driver_logger: Any = None,
        user_callback: list[Any] | None = None,
        **_ignored: Any,
    ) -> None:
        self.model = model
        self.datasets_function = datasets_function
        self.loss_function = loss_function
        self.optimizer = optimizer
        self.driver_logger = driver_logger
        self.user_callback = list(user_callback or [])

    def _datasets(self, data_dir: str) -> Any:
        takes_dir = len(inspect.signature(self.datasets_function).parameters) > 0
        return self.datasets_function(data_dir) if takes_dir else self.datasets_function()

    def _optimizer(self, _params: Any, lr: float) -> Any:
        for group in self.optimizer.param_groups:
            group["lr"] = lr  # the job's learning rate wins
        return self.optimizer

    def train(self, epochs: int = 1, batch_size: int = 32, max_workers: int = 1, **_: Any) -> None:
        global _captured
        _captured = ModelDefinition(
            build_model=lambda: self.model,
            get_datasets=self._datasets,
            loss_fn=self.loss_function,
            build_optimizer=self._optimizer,
            lr_at=constant_lr,
            style="wmla",
            script_values={"epochs": epochs, "batch_size": batch_size, "max_workers": max_workers},
            callbacks=self.user_callback,
            logger=self.driver_logger,
        )
