"""The input pipeline (docs/architecture.md, "Input pipeline"): image folders read on
demand, DataLoader workers fed in the elastic protocol's order, augmentation seeded by the
job; the equality and fault guarantees hold through it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import TensorDataset

from edtweb.redis_server import RedisServer
from tests.harness.driven import (
    BATCH,
    PACED_TWIN,
    SEED,
    assert_same_training,
    drive,
    events,
    plain_training,
    sizes,
)
from workers.learner import loader
from workers.learner.datasets import describe, detect_format, load_dataset, write_imagefolder
from workers.learner.partition import (
    micro_batches,
    permutation,
    rank_indices,
    rank_slice,
    slice_bounds,
)
from workers.learner.shards import write_shards
from workers.learner.spec import JobSpec

LAZY = ("--loader-workers", "1")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1024 training and 256 test images, 32x32, 10 classes: the MLP's input."""
    return write_imagefolder(tmp_path_factory.mktemp("folder"), 1024, 256, num_classes=10)


# ------------------------------------------------------------------------- the order


@pytest.mark.parametrize("cap", [0, 5])
@pytest.mark.parametrize("sizes_", [[1, 3, 2, 3, 1], [4, 1], [2, 2, 5]])
def test_the_order_yields_each_ranks_slice_of_the_global_batch(cap: int, sizes_: list[int]) -> None:
    """At every iteration, for each size the job passes through (and in reverse), each
    rank's micro-batches put together are its slice of perm(seed, epoch)[t*B:(t+1)*B]."""
    for seq in (sizes_, sizes_[::-1]):
        samples, batch, epochs = 100, 12, 3
        order = loader.ElasticOrder(samples, batch, SEED, epochs, cap)
        for step, size in enumerate(seq * 3):
            epoch, it = divmod(step, order.per_epoch)
            if epoch >= epochs:
                break
            for rank in range(size):
                order.place = (epoch, it, size, rank)
                pieces = order.pieces(size, rank)
                got = [i for piece in list(iter(order))[:pieces] for i in piece]
                perm = permutation(samples, SEED, epoch)
                assert got == rank_indices(perm, it, batch, size, rank)
                lo, hi = slice_bounds(batch, size, rank)
                assert all(len(p) <= (cap or hi - lo) for p in list(iter(order))[:pieces])


GOODPUT_PLACES = [  # (size, batch, iterations): the batch moves within an epoch
    (1, 12, 3), (3, 30, 2), (2, 7, 4), (1, 40, 3), (4, 9, 5),
]  # fmt: skip


@pytest.mark.parametrize("cap", [0, 4])
@pytest.mark.parametrize("places", [GOODPUT_PLACES, GOODPUT_PLACES[::-1]])
def test_the_goodput_order_feeds_each_ranks_slice_from_the_samples_done(
    cap: int, places: list[tuple[int, int, int]]
) -> None:
    """Through one Feed per rank (workers 0: the same DataLoader path in this process), at
    each size and batch in turn, each iteration is the rank's slice of the next ``batch``
    samples of perm(seed, epoch), cut at the job's cap (a lone learner's too: its noise
    scale needs no cut); an epoch ends where no whole batch is left."""
    samples, epochs = 100, 4
    data = TensorDataset(torch.arange(samples), torch.zeros(samples))
    spec = JobSpec(job_id="j", model="m", data="d", workdir="w", seed=SEED, epochs=epochs,
                   max_micro_batch=cap, loader_workers=1)  # fmt: skip
    feeds = [loader.feed_for(data, spec, pin=False, goodput=True)[1] for _ in range(4)]
    assert all(f is not None and isinstance(f.order, loader.GoodputOrder) for f in feeds)
    feeds = [loader.Feed(data, f.order, 0, False) for f in feeds if f is not None]
    counters = {"epoch": 0, "sample": 0}
    for size, batch, iterations in places:
        for _ in range(iterations):
            if counters["sample"] + batch > samples:
                counters = {"epoch": counters["epoch"] + 1, "sample": 0}
            perm = permutation(samples, SEED, counters["epoch"])
            for rank in range(size):
                fed = feeds[rank].take(feeds[rank].place(counters, batch, size, rank))
                assert [int(i) for x, _ in fed for i in x] == rank_slice(
                    perm, counters["sample"], batch, size, rank)  # fmt: skip
                lo, hi = slice_bounds(batch, size, rank)
                assert [len(x) for x, _ in fed] == [
                    b - a for a, b in micro_batches(0, hi - lo, cap)]  # fmt: skip
            counters["sample"] += batch
    # the workers restart where the size or the batch changes, never within a run of them
    assert [f.restarts for f in feeds] == [sum(r < size for size, _, _ in places) for r in range(4)]


def test_the_default_workers_are_the_slots_share_of_the_cores() -> None:
    assert loader.default_workers(cores=16, slots=8) == 1
    assert loader.default_workers(cores=16, slots=2) == 7
    assert loader.default_workers(cores=64, slots=1) == loader.MOST_WORKERS
    assert loader.default_workers(cores=2, slots=4) == 1  # never none: a worker at least


# ------------------------------------------------------------------------- image folders


def test_an_image_folder_is_listed_not_decoded_and_reads_each_sample_on_demand(
    tmp_path: Path,
) -> None:
    write_imagefolder(tmp_path, train=30, test=12, num_classes=3, size=24)
    broken = tmp_path / "train" / "bird" / "zz-broken.png"
    broken.write_bytes(b"not a png")  # not read until asked for
    train, test, classes = load_dataset(tmp_path)
    assert (len(train), len(test), classes) == (31, 12, ["airplane", "automobile", "bird"])
    assert describe(tmp_path)["splits"]["train"]["per_class"] == {
        "airplane": 10, "automobile": 10, "bird": 11}  # fmt: skip
    first = sorted((tmp_path / "train" / "airplane").iterdir())[0]
    expected = np.asarray(Image.open(first).convert("RGB")).transpose(2, 0, 1) / 255
    assert torch.allclose(train[0][0], torch.from_numpy(expected).float())
    with pytest.raises(ValueError, match=r"train/bird/zz-broken\.png is not a readable image"):
        train[30]


def test_images_of_any_size_come_to_the_size_the_job_names(tmp_path: Path) -> None:
    for name, size in (("wide", (400, 100)), ("tall", (60, 300)), ("small", (20, 20))):
        (tmp_path / "train" / "a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "test" / "a").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (200, 10, 10)).save(tmp_path / "train" / "a" / f"{name}.jpg")
        Image.new("RGB", size, (10, 200, 10)).save(tmp_path / "test" / "a" / f"{name}.png")
    train, test, _ = load_dataset(tmp_path, side=32)
    for dataset in (train, test):
        assert {tuple(dataset[i][0].shape) for i in range(3)} == {(3, 32, 32)}
    assert abs(float(train[0][0][0].mean()) - 200 / 255) < 0.02  # a JPEG's red, decoded small
    unnamed, _, _ = load_dataset(tmp_path)  # no size named: the first image's (small.jpg)
    assert {tuple(unnamed[i][0].shape) for i in range(3)} == {(3, 20, 20)}


# ------------------------------------------------------------------------- .npy shards


def test_npy_shards_are_memory_mapped_and_read_one_sample_at_a_time(tmp_path: Path) -> None:
    write_shards(tmp_path, 90, 30, shards=3)
    assert detect_format(tmp_path) == "npyshards"
    train, test, classes = load_dataset(tmp_path)
    assert (len(train), len(test), classes[:2]) == (90, 30, ["airplane", "automobile"])
    assert describe(tmp_path)["splits"]["test"]["count"] == 30
    stored = np.load(tmp_path / "x_train.001.npy")[0].transpose(2, 0, 1)
    assert torch.allclose(train[30][0], torch.from_numpy(stored).float() / 255)
    assert all(isinstance(m, np.memmap) for m in train._maps)  # type: ignore[attr-defined]


def test_npy_shards_train_through_the_loader_like_one_process(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    data = write_shards(tmp_path / "shards", 512, 64, shards=4)
    workdir = drive(redis_server, tmp_path, data, "0:2", 12)  # the default loader workers
    losses, params = plain_training(data, 12)
    assert_same_training(workdir, 12, losses, params)


# ------------------------------------------------------------------------- augmentation


def test_augmentation_depends_on_the_seed_epoch_and_sample_alone(folder: Path) -> None:
    train, _, _ = load_dataset(folder)
    spec = JobSpec(job_id="j", model="m", data=str(folder), workdir="w", augment=1, seed=3)
    augmented, feed = loader.feed_for(train, spec, pin=False, goodput=False)
    assert feed is not None and isinstance(augmented, loader.Augmented)
    again = loader.Augmented(train, 3, loader.statistics(train))
    same = [torch.equal(augmented[(e, i)][0], again[(e, i)][0]) for e in (0, 1) for i in (5, 9)]
    assert all(same)
    epochs_differ = [not torch.equal(augmented[(0, i)][0], augmented[(1, i)][0]) for i in range(8)]
    assert any(epochs_differ)  # a sample's crop and flip change from epoch to epoch
    normalised = augmented[0][0]
    assert abs(float(normalised.mean())) < 0.5  # the statistics' normalisation, no crop


def test_a_goodput_job_is_augmented_as_any_other(folder: Path) -> None:
    train, _, _ = load_dataset(folder)
    spec = JobSpec(job_id="j", model="m", data=str(folder), workdir="w", augment=1, seed=3)
    augmented, feed = loader.feed_for(train, spec, pin=False, goodput=True)
    assert isinstance(augmented, loader.Augmented) and feed is not None
    assert isinstance(feed.order, loader.GoodputOrder) and feed.order.keyed
    feed.order.place = (1, 0, 8, 2, 1)
    first = next(iter(feed.order))
    assert first == [(1, i) for i in rank_slice(permutation(len(train), 3, 1), 0, 8, 2, 1)]


# ------------------------------------------------------------------------- through the loader


def test_a_lazy_dataset_resized_1_3_2_gives_the_single_process_updates(
    redis_server: RedisServer, tmp_path: Path, folder: Path
) -> None:
    steps = 60
    workdir = drive(redis_server, tmp_path, folder, "0:1,20:3,40:2", steps, *LAZY,
                    model=PACED_TWIN)  # fmt: skip
    assert sizes(workdir) == [1, 3, 2]
    losses, params = plain_training(folder, steps)
    assert losses[-1] < losses[0]
    assert_same_training(workdir, steps, losses, params)


def test_a_lazy_job_loses_a_killed_then_a_frozen_learner_and_no_step(
    redis_server: RedisServer, tmp_path: Path, folder: Path
) -> None:
    steps = 50
    workdir = drive(redis_server, tmp_path, folder, "0:3", steps, *LAZY, "--kill", "15:KILL",
                    "--kill", "30:STOP", "--timeout", "5", model=PACED_TWIN)  # fmt: skip
    faults = [e for e in events(workdir) if e["kind"] == "fault"]
    assert [f["signal"] for f in faults] == ["SIGKILL", "SIGSTOP"]
    # Each learner hit was dropped, the killed one and then the frozen one (the sizes
    # between depend on how soon the replacement for the first is READY).
    failures = [e for e in events(workdir) if e["kind"] == "failure"]
    assert [f["lost"] for f in failures] == [f["slots"] for f in faults], failures
    losses, params = plain_training(folder, steps)
    assert_same_training(workdir, steps, losses, params)


def test_a_killed_lazy_job_resumes_from_its_checkpoint_at_the_right_sample(
    redis_server: RedisServer, tmp_path: Path, folder: Path
) -> None:
    steps = 40
    workdir = drive(redis_server, tmp_path, folder, "0:2", steps, *LAZY, "--kill", "24:KILL:all",
                    model=PACED_TWIN)  # fmt: skip
    restart = next(e for e in events(workdir) if e["kind"] == "restart")
    assert restart["from_step"] % (1024 // BATCH) == 0 and restart["from_step"] >= 16
    losses, params = plain_training(folder, steps)
    assert_same_training(workdir, steps, losses, params)


def test_an_augmented_job_at_two_workers_sees_the_samples_one_worker_sees(
    redis_server: RedisServer, tmp_path: Path, folder: Path
) -> None:
    steps = 20
    workdir = drive(redis_server, tmp_path, folder, "0:1,10:2", steps, *LAZY, "--augment", "1",
                    model=PACED_TWIN)  # fmt: skip
    train, _, _ = load_dataset(folder)
    augmented = loader.Augmented(train, SEED, loader.statistics(train))
    losses, params = plain_training(folder, steps, lambda e, i: augmented[(e, i)][0])
    assert_same_training(workdir, steps, losses, params)
