"""WMLA's callback classes: subclass them and pass instances to FabricModel."""

from __future__ import annotations

from typing import Any


class Callback:
    def on_epoch_begin(self, epoch: int) -> None:
        """Called on rank 0 before each epoch."""

    def on_epoch_end(self, epoch: int) -> None:
        """Called on rank 0 after each epoch's evaluation."""


class LoggerCallback:
    def log_train_metrics(self, loss: float, accuracy: float, epoch: int, step: int) -> None:
        """Called on rank 0 with each iteration's training loss."""

    def log_test_metrics(self, loss: float, accuracy: float, epoch: int) -> None:
        """Called on rank 0 with each epoch's test loss and accuracy."""


def call_all(callbacks: list[Any], name: str, *args: Any) -> None:
    for callback in callbacks:
        method = getattr(callback, name, None)
        if callable(method):
            method(*args)
