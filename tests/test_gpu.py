"""The GPU path: NCCL generations, NVML telemetry from the real device, the engine on a GPU.

Runs only where CUDA is present; elsewhere every test is skipped, naming the missing CUDA
device. Speed on a GPU is measured by ``bench/bench_gpu.py``, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.jobstore import JobStore
from tests.harness.processes import PROJECT_DIR, subprocess_env
from workers.learner.datasets import write_cifar10
from workers.learner.inputs import on_device
from workers.learner.spec import JobSpec

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: the GPU path needs one"
)
two_gpus = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"no second CUDA device ({torch.cuda.device_count()} found): a resize between GPUs",
)
MLP = PROJECT_DIR / "examples" / "mlp.py"
WIDE = PROJECT_DIR / "bench" / "wide_mlp.py"
STEPS, BATCH, LR, SEED = 40, 64, 0.01, 0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("data"), train=1024, test=256)


def test_a_one_member_generation_forms_an_nccl_group(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    from workers.learner.engine import Learner

    job = f"gpu-{uuid.uuid4().hex[:8]}"
    jobs = JobStore(connect(redis_server.url), job)
    spec = JobSpec(job_id=job, model=str(MLP), data=str(dataset), workdir=str(tmp_path))
    learner = Learner(spec, "g0", jobs, redis_server.url)
    learner.prepare()  # the step's part joins each group formed: it exists from here
    # the dataset fits: it lives on the GPU, each batch gathered there in the step
    assert on_device(learner.inputs.train_set) and not learner.inputs.prefetch.always
    gen = jobs.publish_generation(["g0"])
    learner.form_group(gen)
    assert learner.device.type == "cuda"
    assert type(learner.membership.pg).__name__ == "ProcessGroupNCCL"
    value = torch.arange(4, dtype=torch.float32, device="cuda")
    learner.membership.collective("allreduce", value)
    torch.cuda.synchronize()
    assert value.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert jobs.adopted() == gen


def test_nvml_reads_the_real_device() -> None:
    from workers.telemetry import NvmlSampler, discover_gpus

    found = discover_gpus()
    assert found.gpus, found.reason
    first = found.gpus[0]
    sample = NvmlSampler(first.uuid).sample()
    assert sample["kind"] == "gpu" and sample["name"] == first.name
    assert sample["mem_total"] == first.memory_total > 0
    assert 0 <= sample["gpu_util"] <= 100 and 0 < sample["mem_used"] <= sample["mem_total"]


def drive(redis: RedisServer, tmp: Path, data: Path, model: Path, schedule: str,
          *extra: str) -> Path:  # fmt: skip
    workdir = tmp / f"run-{uuid.uuid4().hex[:6]}"
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(model),
           "--data", str(data), "--schedule", schedule, "--batch-size", str(BATCH),
           "--max-steps", str(STEPS), "--epochs", "100", "--lr", str(LR), "--seed", str(SEED),
           "--workdir", str(workdir), "--deadline", "300", *extra]  # fmt: skip
    env = subprocess_env(tmp, REDIS_URL=redis.url)
    done = subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
                          timeout=400)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return workdir


def losses(workdir: Path) -> list[dict[str, Any]]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == "train"]


def plain_gpu_losses(model_path: Path, data: Path) -> list[float]:
    """Plain single-GPU PyTorch, the same seed, order and batch."""
    from workers.learner.contract import load_definition
    from workers.learner.datasets import load_dataset
    from workers.learner.partition import iterations_per_epoch, permutation

    defn = load_definition(model_path)
    train, _test, _ = load_dataset(data)
    x_all, y_all = (t.cuda() for t in train.tensors)
    torch.manual_seed(SEED)
    model = defn.build_model().cuda()
    optimizer = defn.build_optimizer(model.parameters(), LR)
    per_epoch = iterations_per_epoch(len(x_all), BATCH)
    out = []
    for step in range(STEPS):
        epoch, it = divmod(step, per_epoch)
        order = permutation(len(x_all), SEED, epoch)[it * BATCH : (it + 1) * BATCH]
        idx = torch.tensor(order, device="cuda")
        optimizer.zero_grad()
        loss = defn.loss_fn(model(x_all[idx]), y_all[idx])
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        out.append(float(loss.detach()))
    return out


def test_the_engine_on_one_gpu_trains_like_plain_pytorch_on_the_wide_model(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, WIDE, "0:1")
    got = [r["loss"] for r in losses(workdir)]
    assert got == pytest.approx(plain_gpu_losses(WIDE, dataset), rel=1e-3)


def test_fp16_with_a_gradient_scaler_trains_on_a_gpu(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, MLP, "0:1", "--precision", "fp16")
    got = [r["loss"] for r in losses(workdir)]
    assert len(got) == STEPS and got[-1] < got[0]


@two_gpus
def test_a_resize_between_nccl_generations_keeps_the_updates(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, MLP, "0:1,10:2,25:1", "--gpus", "2",
                    "--precision", "fp16")  # fmt: skip
    records = losses(workdir)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert {r["workers"] for r in records} == {1, 2}
    single = drive(redis_server, tmp_path, dataset, MLP, "0:1", "--precision", "fp16")
    # the scaler's state travelled with the rest: the same updates as one GPU throughout
    want = [r["loss"] for r in losses(single)]
    assert [r["loss"] for r in records] == pytest.approx(want, rel=1e-3)
