"""Checking an uploaded model definition before anyone trains it (docs/architecture.md, "Model
definition contract").

The web process calls :func:`validate`, which runs ``python -m workers.learner.validate`` as a
child in the same sandbox as learners (``workers/sandbox.py``: an unprivileged user, only the
model's code and the dataset readable, only a private temporary directory writable, limits
on memory, processes, file size and CPU time), with a scrubbed environment (``learner_env``:
no secrets) and a time limit, after which the whole process tree is killed. User code never
runs in the web process, so this module imports neither torch nor the user's file at import
time.

The child loads the definition (native or WMLA style), checks its entry points, builds the
model, runs one forward pass on a batch of two (zeros of ``--shape``, or two samples of
``--data``), computes the loss on dummy targets (or the samples' labels), backpropagates it
and builds the optimizer. It prints exactly one JSON line on stdout: the fields of
:class:`ValidationResult` except ``log``. Whatever the user's code prints goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

PROJECT_DIR = Path(__file__).resolve().parents[2]
LOG_TAIL = 8000  # bytes of the child's stderr kept in ValidationResult.log
BATCH = 2
LR = 0.01
CPU_MARGIN = 10  # CPU seconds allowed beyond the time limit (torch's import included)


@dataclass
class ValidationResult:
    """What the check found. ``line`` is the ``File "x.py", line N, in f: code`` line of the
    user's own file where the failure happened, else the ``def`` line there of the function
    that failed the check ("" when neither is in their file). ``log`` is the tail of what the
    child wrote on stderr (the user's prints, the traceback)."""

    ok: bool
    style: str = "native"
    parameters: int = 0
    output_shape: list[int] = field(default_factory=list)
    error: str = ""
    line: str = ""
    warnings: list[str] = field(default_factory=list)
    log: str = ""

    def report(self) -> str:
        """The child's one JSON line."""
        fields = asdict(self)
        del fields["log"]
        return json.dumps(fields)

    @classmethod
    def from_report(cls, line: str, log: str) -> ValidationResult:
        data = json.loads(line)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "log"}
        return cls(**known, log=log)


# --------------------------------------------------------------------------- the web's side


def validate(
    path: Path,
    shape: tuple[int, ...] = (3, 32, 32),
    classes: int | None = 10,
    data: Path | None = None,
    timeout: float = 60.0,
    config: dict[str, Any] | None = None,
) -> ValidationResult:
    """Check the model definition in ``path`` in a child process; never raises for bad code.

    ``timeout`` is in seconds, for loading, building and one batch together. ``config``: a
    WMLA hypersearch's point, written as ``config.json`` in the working directory the
    script runs in (as each of its trials finds its own).
    """
    from workers import sandbox
    from workers.learner.allocator import HUGE_PAGES
    from workers.learner.host import learner_env  # no torch: safe in the web process

    env = learner_env("", dict(os.environ))  # REDIS_URL is not needed: an empty one
    # one step: a process's first huge pages cost more than they save (allocator.py)
    env[HUGE_PAGES] = os.environ.get(HUGE_PAGES, "0")
    with (
        tempfile.TemporaryDirectory(prefix="edt-validate-") as tmp,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        env.update(TMPDIR=tmp, HOME=tmp)  # what the child leaves there goes, even if killed
        workdir = None
        if config is not None:
            from workers.learner.contract import write_config

            workdir = Path(tmp) / "work"
            workdir.mkdir()
            write_config(workdir, config)
        read = [Path(path).resolve().parent, *([data] if data is not None else [])]
        policy = sandbox.policy(
            read=read, write=[Path(tmp)], memory=sandbox.memory_limit(),
            cpu_seconds=int(timeout) + CPU_MARGIN,
        )  # fmt: skip
        proc = subprocess.Popen(
            sandbox.command(policy, _command(path, shape, classes, data, timeout, workdir), env),
            cwd=PROJECT_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=sandbox.dies_with_parent(),  # the check's process killed: all goes
        )
        timed_out = _wait(proc, timeout)
        return _result(proc.returncode, _tail(out), _tail(err), timed_out, timeout)


def _command(
    path: Path,
    shape: tuple[int, ...],
    classes: int | None,
    data: Path | None,
    timeout: float,
    workdir: Path | None = None,
) -> list[str]:
    cmd = [sys.executable, "-m", "workers.learner.validate", "--model", str(Path(path).resolve())]
    cmd += ["--shape", ",".join(str(n) for n in shape), "--timeout", str(timeout)]
    if workdir is not None:
        cmd += ["--workdir", str(workdir)]
    if classes is not None:
        cmd += ["--classes", str(classes)]
    if data is not None:
        cmd += ["--data", str(Path(data).resolve())]
    return cmd


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for the child; end its whole process tree in any case (the sandbox kills all the
    user's code started, ``setsid`` or not). True when the time ran out."""
    from workers import sandbox

    try:
        proc.wait(timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        sandbox.stop(proc)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return timed_out


def _tail(file: IO[bytes]) -> str:
    """The last LOG_TAIL bytes of what the child wrote (its output may be huge)."""
    end = file.seek(0, os.SEEK_END)
    file.seek(max(0, end - LOG_TAIL))
    return file.read().decode("utf-8", "replace")


def _result(code: int, out: str, log: str, timed_out: bool, timeout: float) -> ValidationResult:
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if lines:
        with contextlib.suppress(ValueError, TypeError):
            return ValidationResult.from_report(lines[-1], log)
    if timed_out:
        error = f"the model took longer than {timeout:g} s to build and run one batch"
        return ValidationResult(ok=False, error=error, log=log)
    last = [line.strip() for line in log.splitlines() if line.strip()]
    return ValidationResult(ok=False, error=last[-1] if last else _exit_reason(code), log=log)


def _exit_reason(code: int) -> str:
    if code < 0 or code > 128:  # the sandbox reports a signal N as 128 + N
        with contextlib.suppress(ValueError):
            return f"the check was killed by {signal.Signals(abs(code) % 128).name}"
    return f"the check exited with status {code} and said nothing"


# --------------------------------------------------------------------------- the child's side


class CheckFailed(Exception):
    """A check on the user's definition failed (the message says which and how)."""


class Checker:
    """The checks, in order. ``stage`` names the step running (for the error message);
    ``hint`` is the ``def`` line in the user's file of the function that step runs (the
    error's line when the traceback has none in their file, as in ``nn.Sequential``)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.path: Path = args.model.resolve()
        self.args = args
        self.stage = f"loading {self.path.name}"
        self.hint = ""
        self.result = ValidationResult(ok=False, style=_guess_style(self.path))

    def run(self) -> ValidationResult:
        try:
            self._check()
            self.result.ok = True
        except BaseException as exc:  # user code may even call sys.exit()
            traceback.print_exc()
            self._fail(exc)
        return self.result

    def _fail(self, exc: BaseException) -> None:
        from workers.learner.__main__ import user_frame
        from workers.learner.contract import UserCodeError
        from workers.sandbox import user_limit

        if isinstance(exc, CheckFailed | UserCodeError):
            self.result.error = str(exc)
        elif limit := user_limit(exc):
            self.result.error = f"{self.stage} failed: {limit}"
        else:
            self.result.error = f"{self.stage} failed: {type(exc).__name__}: {exc}"
        self.result.line = user_frame(exc, str(self.path)) if self._in_file(exc) else self.hint

    def _in_file(self, exc: BaseException) -> bool:
        """Whether the error happened in the user's own file (not in torch, not in ours)."""
        if isinstance(exc, SyntaxError) and exc.filename == str(self.path):
            return True
        return any(f.filename == str(self.path) for f in traceback.extract_tb(exc.__traceback__))

    def _check(self) -> None:
        import torch

        torch.manual_seed(0)  # WMLA-style scripts build their model on import
        defn = self._load()
        self.stage, self.hint = "building the model", self._where(defn.build_model)
        model = defn.build_model()
        if not isinstance(model, torch.nn.Module):
            raise CheckFailed(f"build_model() returned {_kind(model)}, not a torch.nn.Module")
        self.hint = self._where(type(model).forward) or self.hint
        self.result.parameters = sum(p.numel() for p in model.parameters())
        x, y = self._batch(defn)
        output = self._forward(model, x)
        self._loss(defn, output, y)
        self._optimizer(defn, model)

    def _load(self) -> Any:
        from workers.learner.contract import load_definition

        defn = load_definition(self.path)
        self.result.style = defn.style
        self.stage = "checking the entry points"
        for name in ("build_model", "get_datasets", "loss_fn", "build_optimizer", "lr_at"):
            value = getattr(defn, name)
            if value is not None and not callable(value):
                raise CheckFailed(f"{name} must be a function; it is {_kind(value)}")
        return defn

    def _batch(self, defn: Any) -> tuple[Any, Any]:
        """Two samples of ``--data`` with their labels, else zeros of ``--shape`` and None."""
        import torch

        if self.args.data is None:
            return torch.zeros(BATCH, *self.args.shape), None
        self.stage = f"loading {BATCH} samples of the dataset"
        if defn.get_datasets is not None:
            train = defn.get_datasets(str(self.args.data))[0]
        else:
            from workers.learner.datasets import load_dataset

            train = load_dataset(self.args.data)[0]
        if len(train) < BATCH:
            raise CheckFailed(f"the training set has {len(train)} samples; at least {BATCH}")
        x, y = torch.utils.data.default_collate([train[i] for i in range(BATCH)])
        return x, y

    def _forward(self, model: Any, x: Any) -> Any:
        import torch

        self.stage = "the forward pass"
        model.train()
        output = model(x)
        if not isinstance(output, torch.Tensor):
            raise CheckFailed(f"the model returned {_kind(output)}, not a tensor")
        shape = self.result.output_shape = list(output.shape)
        if not shape or shape[0] != BATCH:
            raise CheckFailed(
                f"the model's output has shape {shape} for a batch of {BATCH}: "
                f"its first dimension must be the batch size ({BATCH})"
            )
        classes = self.args.classes
        if classes is not None and len(shape) == 2 and shape[1] != classes:
            self.result.warnings.append(
                f"the model has {shape[1]} outputs per sample; the dataset has {classes} classes"
            )
        return output

    def _loss(self, defn: Any, output: Any, target: Any) -> None:
        import torch

        self.stage, self.hint = "computing the loss", self._where(defn.loss_fn)
        if target is None:  # class indices for a classifier, else a target like the output
            target = torch.zeros(BATCH, dtype=torch.long) if output.dim() == 2 else output * 0
        loss = defn.loss_fn(output, target.detach())
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = list(loss.shape) if isinstance(loss, torch.Tensor) else _kind(loss)
            raise CheckFailed(f"the loss must be a tensor with one value; got {got}")
        if not torch.isfinite(loss).all():
            self.result.warnings.append(f"the loss is {float(loss)} on this batch")
        self.stage = "backpropagating the loss"
        if loss.requires_grad:
            loss.backward()  # type: ignore[no-untyped-call]
        else:
            self.result.warnings.append("the loss does not depend on the model's parameters")

    def _optimizer(self, defn: Any, model: Any) -> None:
        import torch

        self.stage, self.hint = "building the optimizer", self._where(defn.build_optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = defn.build_optimizer(params, LR)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise CheckFailed(
                f"build_optimizer() returned {_kind(optimizer)}, not a torch.optim.Optimizer"
            )
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if params and not held & {id(p) for p in params}:
            self.result.warnings.append("the optimizer updates none of the model's parameters")

    def _where(self, obj: Any) -> str:
        """The ``def`` line of ``obj`` when it is in the user's file, else ""."""
        try:
            if Path(inspect.getsourcefile(obj) or "").resolve() != self.path:
                return ""
            lines, number = inspect.getsourcelines(obj)
        except (TypeError, OSError):
            return ""
        name = getattr(obj, "__name__", "")
        return f'File "{self.path.name}", line {number}, in {name}: {lines[0].strip()}'


def _kind(value: Any) -> str:
    return "None" if value is None else f"a value of type {type(value).__name__}"


def _guess_style(path: Path) -> str:
    """Before the file loads: WMLA style if it mentions FabricModel."""
    try:
        return "wmla" if "FabricModel" in path.read_text(errors="replace") else "native"
    except OSError:
        return "native"


def _prepare(args: argparse.Namespace, empty: Path) -> None:
    """A backstop alarm, threads and the job's values for WMLA's pth_parameter_mgr (the
    sandbox has set the limits)."""
    signal.alarm(int(args.timeout) + 10)  # if the parent died and cannot kill us
    os.environ.update(EDT_JOB_DATA=str(args.data or empty), EDT_JOB_EPOCHS="1", EDT_JOB_LR=str(LR))
    import torch

    torch.set_num_threads(int(os.environ.get("EDT_TORCH_THREADS", "1")))


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(",") if n.strip())


def _claim_stdout() -> IO[str]:
    """The JSON line's own copy of stdout; fd 1 becomes stderr for the user's prints."""
    out = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.learner.validate")
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--shape", type=_shape, default=(3, 32, 32), help="e.g. 3,32,32")
    parser.add_argument("--classes", type=int, default=None)
    parser.add_argument("--data", type=Path, default=None, help="a dataset directory")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds (a backstop)")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="the script's working directory (config.json)"
    )
    args = parser.parse_args(argv)
    out = _claim_stdout()
    if args.workdir is not None:
        os.chdir(args.workdir)
    with tempfile.TemporaryDirectory(prefix="edt-data-") as empty:
        _prepare(args, Path(empty))
        result = Checker(args).run()
    out.write(result.report() + "\n")
    out.flush()
    return 0 if result.ok else 1


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # not waiting for threads the user's code may have left running
