"""WMLA's ``FabricModel`` for scripts written for IBM's Elastic Distributed Training.

In EDT a WMLA script runs as ``__main__`` and ``FabricModel(...).train(epochs, batch_size,
max_workers)`` hands the model, data, loss, optimizer and callbacks to the platform's driver:
in a learner, EDT's elastic loop, which trains until the job ends or this learner leaves it,
then returns to the script; in the model check, the check. Values set on the job in EDT
override the script's; those left unset (an exec submitted without ``--epochs``, say) are
the script's own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from workers.learner.contract import ModelDefinition, UserCodeError
from workers.learner.submission import DEFAULTS

_driver: Callable[[ModelDefinition], Any] | None = None
_train_called = False


def set_driver(driver: Callable[[ModelDefinition], Any] | None) -> None:
    """What ``train()`` hands the definition to (None: nobody, outside EDT)."""
    global _driver, _train_called
    _driver, _train_called = driver, False


def train_called() -> bool:
    return _train_called


class FabricModel:
    def __init__(
        self,
        model: Any,
        datasets_function: Any,
        loss_function: Any,
        optimizer: Any,
        driver_logger: Any = None,
        user_callback: list[Any] | None = None,
        fn_step_train: Any = None,
        fn_test: Any = None,
        **options: Any,
    ) -> None:
        self.model = model
        self.datasets_function = datasets_function
        self.loss_function = loss_function
        self.optimizer = optimizer
        self.driver_logger = driver_logger
        self.user_callback = list(user_callback or [])
        self.fn_step_train = fn_step_train
        self.fn_test = fn_test
        self.options = options  # enable_onnx and the like: no meaning on EDT

    # What WMLA's fn_step_train receives as ``model``
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def get_optimizer(self) -> Any:
        return self.optimizer

    def get_loss_function(self) -> Any:
        return self.loss_function

    def get_model(self) -> Any:
        return self.model

    def _datasets(self, data_dir: str) -> Any:
        takes_dir = len(inspect.signature(self.datasets_function).parameters) > 0
        return self.datasets_function(data_dir) if takes_dir else self.datasets_function()

    def _optimizer(self, _params: Any, lr: float | None) -> Any:
        if lr is not None:  # the job's learning rate, when it was set, wins
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        return self.optimizer

    def train(
        self,
        epochs: int = DEFAULTS["epochs"],
        batch_size: int = DEFAULTS["batch_size"],
        max_workers: int = DEFAULTS["max_workers"],
        **_: Any,
    ) -> Any:
        """Train under EDT: returns once the job has ended for this learner. A value the
        script leaves out is a submission's default, as for one the job leaves out."""
        global _train_called
        if _driver is None:
            raise RuntimeError(
                "FabricModel.train() runs under EDT: submit this script as a model (the "
                "learner runs it as __main__ and trains through this call)"
            )
        if _train_called:
            raise UserCodeError("FabricModel(...).train() was called twice; EDT runs one per job")
        _train_called = True
        return _driver(
            ModelDefinition(
                build_model=lambda: self.model,
                get_datasets=self._datasets,
                loss_fn=self.loss_function,
                build_optimizer=self._optimizer,
                lr_at=None,
                style="wmla",
                script_values={
                    "epochs": int(epochs),
                    "batch_size": int(batch_size),
                    "max_workers": int(max_workers),
                },
                callbacks=self.user_callback,
                logger=self.driver_logger,
                train_step=self.fn_step_train,
                test_step=self.fn_test,
                fabric=self,
            )
        )
