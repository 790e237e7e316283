"""WMLA's callback classes: subclass them and pass instances to FabricModel.

``user_callback`` entries (``Callback``) run in every learner, so that one which changes the
optimizer (a learning-rate schedule, say) changes it everywhere; ``driver_logger``
(``LoggerCallback``) runs once per job, in the learner of rank 0, as WMLA's driver does.
Accuracies are in percent, as WMLA passes them; ``completed_batch`` counts the global
iterations done so far; ``worker`` is the reporting learner's rank (0).
"""

from __future__ import annotations

from typing import Any


class Callback:
    def __init__(self) -> None:
        self.params: dict[str, Any] = {}

    def set_params(self, params: dict[str, Any]) -> None:
        """``model``, ``optimizer``, ``loss_function``, ``epochs``, ``batch_size``."""
        self.params = params

    def on_epoch_begin(self, epoch: int) -> None:
        """Called in every learner before each epoch."""

    def on_epoch_end(self, epoch: int) -> None:
        """Called in every learner after each epoch's evaluation."""


class LoggerCallback:
    def log_train_metrics(
        self, loss: float, acc: float, completed_batch: int, worker: int = 0
    ) -> None:
        """Each iteration: its training loss, its accuracy in percent."""

    def log_test_metrics(
        self, loss: float, acc: float, completed_batch: int, worker: int = 0
    ) -> None:
        """Each epoch's end: the test loss and accuracy in percent."""

    def on_train_end(self) -> None:
        """Once training has run to its end (not when stopped), before the job completes:
        where a hypersearch's trial writes ``$RESULT_DIR/val_dict_list.json``."""


def give_params(callbacks: list[Any], params: dict[str, Any]) -> None:
    for callback in callbacks:
        setter = getattr(callback, "set_params", None)
        if callable(setter):
            setter(params)
        else:
            callback.params = params


def call_all(callbacks: list[Any], name: str, *args: Any) -> None:
    for callback in callbacks:
        method = getattr(callback, name, None)
        if callable(method):
            method(*args)
