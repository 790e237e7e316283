"""A learner's parts alone, without a cluster (workers/learner/engine.py composes them):
the input part's batches against the protocol's order, the bookkeeping part's records of
steps rank 0 may not have written and its checkpoints, goodput mode's batch."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.jobstore import JobStore
from tests.harness.processes import PROJECT_DIR
from tests.harness.waiting import wait_for
from workers.learner.bookkeeping import Bookkeeping
from workers.learner.contract import load_definition
from workers.learner.datasets import write_cifar10
from workers.learner.goodput import MEASURE_EVERY, GoodputMode
from workers.learner.inputs import Inputs
from workers.learner.overlap import squared_norm
from workers.learner.partition import permutation, rank_indices, rank_slice
from workers.learner.reducer import TorchReducer, _kept
from workers.learner.spec import JobSpec

MLP = PROJECT_DIR / "examples" / "mlp.py"
SAMPLES, BATCH, SEED = 96, 12, 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("data"), train=SAMPLES, test=16)


def loaded_inputs(data: Path, tmp: Path, **spec: Any) -> Inputs:
    """An input part with the job's dataset loaded, as a learner's is before READY."""
    job = JobSpec(job_id="parts", model=str(MLP), data=str(data), workdir=str(tmp),
                  batch_size=BATCH, epochs=3, seed=SEED, **spec)  # fmt: skip
    inputs = Inputs(job, torch.device("cpu"))
    inputs.load(load_definition(MLP))
    inputs.count_iterations()
    return inputs


def samples(inputs: Inputs, batches: list[tuple[Any, Any]]) -> list[int]:
    """Which training samples ``batches`` hold (the images of this dataset differ)."""
    images = inputs.train_set.tensors[0]  # type: ignore[attr-defined]
    flat = images.flatten(1)
    found = []
    for x, _y in batches:
        for row in x.flatten(1):
            found.append(int(torch.nonzero((flat == row).all(dim=1))[0]))
    return found


@pytest.mark.parametrize("sizes", [[1, 3, 2, 4], [4, 2, 3, 1]])
def test_each_ranks_batches_are_its_slice_of_the_protocols_order_at_every_size(
    dataset: Path, tmp_path: Path, sizes: list[int]
) -> None:
    """Iteration by iteration through two epochs, the group resized at each (so that a
    batch built ahead for the old size is never used), every rank's micro-batches hold its
    slice of ``permutation(seed, epoch)`` as partition.py cuts it, and the ranks together
    hold the whole global batch."""
    inputs = loaded_inputs(dataset, tmp_path, max_micro_batch=2)
    try:
        assert inputs.per_epoch == SAMPLES // BATCH
        for k, (epoch, it) in enumerate((e, i) for e in range(2) for i in range(inputs.per_epoch)):
            size = sizes[k % len(sizes)]
            order = permutation(SAMPLES, SEED, epoch)
            together = []
            for rank in range(size):
                want = rank_indices(order, it, BATCH, size, rank)
                assert inputs.my_indices(epoch, it, size, rank).tolist() == want
                batches = inputs.batches_for(epoch, it, size, rank)
                assert all(len(y) <= 2 for _, y in batches)  # the job's micro-batch cap
                assert samples(inputs, batches) == want
                together += want
            assert together == order[it * BATCH : (it + 1) * BATCH]
    finally:
        inputs.prefetch.pool.shutdown()


def test_a_batch_built_ahead_is_the_one_the_next_iteration_takes(
    dataset: Path, tmp_path: Path
) -> None:
    inputs = loaded_inputs(dataset, tmp_path)
    try:
        inputs.prefetch.always = True  # every batch ahead, as on a GPU
        first = samples(inputs, inputs.batches_for(0, 0, 2, 1))
        hits = inputs.prefetch.hits
        second = samples(inputs, inputs.batches_for(0, 1, 2, 1))
        assert inputs.prefetch.hits == hits + 1
        order = permutation(SAMPLES, SEED, 0)
        assert (first, second) == (rank_indices(order, 0, BATCH, 2, 1),
                                   rank_indices(order, 1, BATCH, 2, 1))  # fmt: skip
    finally:
        inputs.prefetch.pool.shutdown()


def test_goodput_batches_start_where_the_samples_done_end(dataset: Path, tmp_path: Path) -> None:
    """A goodput-mode iteration at a batch of 20, 30 samples into epoch 1: each rank's
    slice of the order from there, cut at the micro-batch cap."""
    inputs = loaded_inputs(dataset, tmp_path, batch_min=4, batch_max=48)
    try:
        order = permutation(SAMPLES, SEED, 1)
        for rank in range(3):
            batches = inputs.goodput_batches(1, 30, 20, 3, rank, cap=3)
            assert all(len(y) <= 3 for _, y in batches)
            assert samples(inputs, batches) == rank_slice(order, 30, 20, 3, rank)
    finally:
        inputs.prefetch.pool.shutdown()


def train_record(book: Bookkeeping, step: int) -> dict[str, Any]:
    counters = {"epoch": 0, "iteration": step, "step": step}
    return book.train_record(counters, (2, 1, 1), 0.1, 100, None)


def test_records_rank_0_may_not_have_written_are_kept_and_written_once_by_the_next(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """A member (not rank 0) keeps the records of its steps past the last one Redis took
    from rank 0; when it becomes rank 0 it writes those, and the last evaluation's in its
    place, once: marked ``replay``, and never again at the generation after."""
    jobs = JobStore(connect(private_redis.url), f"parts-{uuid.uuid4().hex[:8]}")
    book = Bookkeeping(jobs, "s1", tmp_path)
    book.took_rank(False)
    for step in range(1, 7):
        if step == 5:  # an evaluation after step 4
            book.tested({"type": "test", "epoch": 0, "step": 4, "test_loss": 1.0}, rank0=False)
        accuracy = book.trained(train_record(book, step), (3.0, 0.5, 2), BATCH, 0.1, False)
        assert accuracy == pytest.approx(25.0)
    assert [r["step"] for r in book.unwritten] == [3, 4, 5, 6]
    assert book.unwritten[0]["loss"] == 0.5 and book.unwritten[0]["accuracy"] == 0.25
    book.records.start()
    try:
        book.took_rank(True)  # the new rank 0
        book.took_rank(True)  # and again at the next generation: nothing more to write
        wait_for(lambda: book.records.written == 6, 10, "the kept records written")
        got = [(r["type"], r["step"], r.get("replay")) for _, r in jobs.read_metrics()]
        assert got == [("train", 3, True), ("train", 4, True), ("test", 4, True),
                       ("train", 5, True), ("train", 6, True)]  # fmt: skip
        assert not book.unwritten
        # as rank 0, its records go out as it trains them (kept, too, for a later rank 0)
        book.trained(train_record(book, 7), (3.0, 0.5, 6), BATCH, 0.1, True)
        wait_for(lambda: book.records.written == 7, 10, "rank 0's record written")
        assert [r["step"] for _, r in jobs.read_metrics()][-1] == 7
        assert [r["step"] for r in book.unwritten] == [7]
    finally:
        book.records.close()


def test_a_checkpoint_is_saved_once_per_step_and_is_the_one_resumed_from(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    jobs = JobStore(connect(private_redis.url), f"parts-{uuid.uuid4().hex[:8]}")
    book = Bookkeeping(jobs, "s0", tmp_path)
    assert book.latest_checkpoint() is None
    asked: list[int] = []

    def state(step: int) -> Any:
        def make() -> dict[str, Any]:
            asked.append(step)
            return {"counters": {"step": step}, "w": torch.full((2,), float(step))}

        return make

    book.records.start()
    try:
        book.save_checkpoint(5, state(5))
        book.save_checkpoint(5, state(5))  # a stop right after the epoch's: not again
        book.save_checkpoint(8, state(8))
        assert asked == [5, 8]
        found = book.latest_checkpoint()
        assert found is not None and found[0].name == "step-000000008.pt"
        assert found[1]["counters"] == {"step": 8} and found[1]["w"].tolist() == [8.0, 8.0]
        wait_for(lambda: jobs.checkpoint_step() == 8, 10, "the checkpoint said in Redis")
    finally:
        book.records.close()


def test_goodput_mode_trains_at_the_batch_a_generation_names_within_its_range() -> None:
    spec = JobSpec(job_id="g", model="m", data="d", workdir="w", batch_size=32,
                   batch_min=16, batch_max=128, max_micro_batch=0)  # fmt: skip
    goodput = GoodputMode(spec, samples=100)
    counters = {"epoch": 0, "iteration": 0, "step": 7}
    goodput.start(counters)
    assert counters["batch"] == 32 and counters["sample"] == 0
    for asked, trained in ((64, 64), (4, 16), (500, 100), (0, 100)):  # 0: none named
        goodput.take_batch(2, asked, counters)
        assert goodput.batch == counters["batch"] == trained
    goodput.begin({"step": 8})  # a measuring step (every MEASURE_EVERY-th)
    assert goodput.measuring and not goodput.pairing
    goodput.begin({"step": 9})  # alone, the step that pairs with it
    assert goodput.pairing and not goodput.measuring
    for step in range(10, 8 + MEASURE_EVERY):
        goodput.begin({"step": step})
        assert not goodput.measuring and not goodput.pairing
    goodput.begin({"step": 8 + MEASURE_EVERY})
    assert goodput.measuring
    goodput.advance(counters)
    assert counters["sample"] == 100 and goodput.epoch_over(counters)


def test_torch_reducer_after_a_failed_step_reduces_again_and_records_nothing() -> None:
    """A step whose all-reduce failed leaves torch's reducer reset (workers/learner/
    reducer.py): it sums the next steps' gradients as before, holds nothing of the failed
    launch (it would keep the generation's group open), and does not go back to recording
    every gradient's order, which would grow for the rest of the job."""
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    params = list(model.parameters())
    reducer = TorchReducer(params, carried=3)
    x, y = torch.randn(6, 8), torch.tensor([0, 1, 0, 1, 1, 0])
    agreement = torch.tensor([4.0, 0.75, 2.0])

    def step(launch: Any) -> list[torch.Tensor]:
        for p in params:
            p.grad = None  # as the step's zero_grad(set_to_none=True)
        carry = reducer.arm(launch, agreement)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        (loss + carry).backward()  # type: ignore[no-untyped-call]
        # the agreement rode in a bucket (one rank: as it was), taken anew each step
        assert torch.equal(reducer.finish(), agreement)
        return [p.grad.clone() for p in params if p.grad is not None]

    def broken(tensor: torch.Tensor) -> Any:
        raise RuntimeError("Connection closed by peer")

    expected = step(_kept)
    with pytest.raises(RuntimeError):
        step(broken)
    assert reducer.armed and reducer.error is not None
    reducer.failed()
    assert not reducer.armed and reducer.error is None
    for _ in range(3):
        got = step(_kept)
        assert len(got) == len(params)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b)
    assert reducer._reducer._rebuild_buckets() is False  # nothing recorded to rebuild from


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_squared_norm_is_the_float64_sum_of_squares_to_float32_precision(
    dtype: torch.dtype,
) -> None:
    """Goodput mode's squared norms (a gradient, a bucket, a micro-batch's): one dot
    product, as a float64 scalar, within float32's rounding of the exact sum of squares; a
    tensor of any shape, a half-precision one taken as float32, zeros exactly 0."""
    generator = torch.Generator().manual_seed(0)
    grad = (torch.randn(3072, 64, generator=generator) * 1e-3).to(dtype)
    exact = float(grad.double().pow(2).sum())
    got = squared_norm(grad)
    assert got.dtype == torch.float64 and got.dim() == 0
    assert abs(float(got) - exact) <= 1e-5 * exact
    assert float(squared_norm(grad[:, 5])) == pytest.approx(
        float(grad[:, 5].double().pow(2).sum()), rel=1e-5
    )
    assert float(squared_norm(torch.zeros(7, 3, dtype=dtype))) == 0.0
