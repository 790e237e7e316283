"""The dataset loaders: format detection, loading, description, generators, and refusals."""

from __future__ import annotations

import os
import pickle
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.harness.waiting import bound
from workers.learner.datasets import (
    CIFAR10_CLASSES,
    DatasetError,
    describe,
    detect_format,
    load_dataset,
    synthetic_images,
    write_cifar10,
    write_cifar100,
    write_imagefolder,
    write_npz,
)


def assert_images_and_labels(split: torch.utils.data.Dataset, n: int, classes: int) -> None:
    """A split's samples (an image folder's decoded one by one, as it is read on demand)."""
    if isinstance(split, torch.utils.data.TensorDataset):
        x, y = split.tensors
    else:
        x, y = torch.utils.data.default_collate([split[i] for i in range(len(split))])
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert len(x) == len(y) == n
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert int(y.min()) >= 0 and int(y.max()) < classes


# ------------------------------------------------------------------------- CIFAR-10


def test_a_generated_cifar10_round_trips_in_the_python_batch_format(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=103, test=40, seed=1)
    assert out == tmp_path / "cifar-10-batches-py"
    names = sorted(p.name for p in out.iterdir())
    assert names == ["batches.meta", *[f"data_batch_{i}" for i in range(1, 6)], "test_batch"]
    assert detect_format(tmp_path) == "cifar10"
    train, test, classes = load_dataset(tmp_path)
    assert classes == list(CIFAR10_CLASSES)
    assert train.tensors[0].shape == (103, 3, 32, 32)
    assert_images_and_labels(train, 103, 10)
    assert_images_and_labels(test, 40, 10)


def test_generated_batches_read_like_the_original_cifar10(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=50, test=10)
    with (out / "data_batch_1").open("rb") as f:
        assert f.read(2) == b"\x80\x02"  # pickle protocol 2
    with (out / "data_batch_1").open("rb") as f:
        batch = pickle.load(f, encoding="bytes")
    assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (10, 3072)
    assert len(batch[b"labels"]) == 10
    with (out / "batches.meta").open("rb") as f:
        assert pickle.load(f, encoding="bytes")[b"label_names"][0] == b"airplane"


def test_cifar_rows_are_red_then_green_then_blue_planes(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=5, test=5)
    with (out / "test_batch").open("rb") as f:
        row = pickle.load(f, encoding="bytes")[b"data"][0]
    _, test, _ = load_dataset(out)
    image = test.tensors[0][0]
    for channel in range(3):
        plane = row[channel * 1024 : (channel + 1) * 1024].reshape(32, 32) / 255
        assert torch.allclose(image[channel], torch.from_numpy(plane).float())


def test_old_numpy_module_names_in_cifar_pickles_are_accepted(tmp_path: Path) -> None:
    """The published CIFAR files name numpy.core.multiarray, as numpy 1 did."""
    out = write_cifar10(tmp_path, train=10, test=10)
    path = out / "test_batch"
    path.write_bytes(path.read_bytes().replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    _, test, _ = load_dataset(tmp_path)
    assert_images_and_labels(test, 10, 10)


def py2_str(value: bytes) -> bytes:
    """A Python 2 ``str`` opcode: what the published CIFAR pickles hold."""
    if len(value) < 256:
        return b"U" + bytes([len(value)]) + value
    return b"T" + struct.pack("<I", len(value)) + value


def python2_cifar_batch(data: np.ndarray, labels: list[int]) -> bytes:
    """A batch pickled as Python 2's cPickle wrote the original CIFAR-10 files."""
    dtype = b"cnumpy\ndtype\n" + py2_str(b"u1") + b"K\x00K\x01\x87R(K\x03" + py2_str(b"|")
    dtype += b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
    shape = b"M" + struct.pack("<H", len(data)) + b"M\x00\x0c\x86"
    array = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85"
    array += py2_str(b"b") + b"\x87R(K\x01" + shape + dtype + b"\x89" + py2_str(data.tobytes())
    listed = b"](" + b"".join(b"K" + bytes([label]) for label in labels) + b"e"
    entries = py2_str(b"data") + array + b"tb" + py2_str(b"labels") + listed
    return b"\x80\x02}(" + entries + b"u."


def test_python2_pickles_like_the_published_cifar10_load(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    images, labels = synthetic_images(3, 10, np.random.default_rng(0))
    data = images.reshape(3, 3072)
    (out / "test_batch").write_bytes(python2_cifar_batch(data, labels.tolist()))
    _, test, _ = load_dataset(tmp_path)
    assert test.tensors[1].tolist() == labels.tolist()
    assert torch.equal(test.tensors[0], torch.from_numpy(images).float() / 255)


def test_fewer_than_five_training_images_leave_empty_batches_that_load(tmp_path: Path) -> None:
    write_cifar10(tmp_path, train=3, test=2)
    train, test, _ = load_dataset(tmp_path)
    assert (len(train), len(test)) == (3, 2)


def test_cifar_pickles_at_protocol_5_with_str_keys_load(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    images, labels = synthetic_images(7, 10, np.random.default_rng(0))
    batch = {"data": images.reshape(7, 3072), "labels": labels}
    (out / "test_batch").write_bytes(pickle.dumps(batch, protocol=5))
    _, test, _ = load_dataset(tmp_path)
    assert test.tensors[1].tolist() == labels.tolist()


def test_writing_2000_cifar10_images_takes_under_two_seconds(tmp_path: Path) -> None:
    start = time.perf_counter()
    write_cifar10(tmp_path, train=2000, test=500)
    assert time.perf_counter() - start < bound(2.0)  # speed itself: bench/


def test_the_synthetic_cifar10_is_learnable(tmp_path: Path) -> None:
    """Nearest class mean, fitted on train, is far above chance (10%) on test."""
    train, test, _ = load_dataset(write_cifar10(tmp_path, train=500, test=200, seed=3))
    x, y = train.tensors
    means = torch.stack([x[y == c].mean(0) for c in range(10)]).flatten(1)
    guess = torch.cdist(test.tensors[0].flatten(1), means).argmin(1)
    assert (guess == test.tensors[1]).float().mean() > 0.5


def test_describe_counts_every_split_and_class(tmp_path: Path) -> None:
    write_cifar10(tmp_path, train=200, test=50)
    info = describe(tmp_path)
    assert info["format"] == "cifar10"
    assert info["classes"] == list(CIFAR10_CLASSES)
    assert info["sample_shape"] == [3, 32, 32]
    assert info["splits"]["train"]["count"] == 200
    assert info["splits"]["train"]["per_class"] == dict.fromkeys(CIFAR10_CLASSES, 20)
    assert sum(info["splits"]["test"]["per_class"].values()) == 50


# ------------------------------------------------------------------------- CIFAR-100


def test_a_generated_cifar100_round_trips_with_fine_labels(tmp_path: Path) -> None:
    write_cifar100(tmp_path, train=300, test=100)
    assert detect_format(tmp_path) == "cifar100"
    train, test, classes = load_dataset(tmp_path)
    assert len(classes) == 100
    assert_images_and_labels(train, 300, 100)
    assert_images_and_labels(test, 100, 100)
    assert describe(tmp_path)["splits"]["test"]["count"] == 100


# ------------------------------------------------------------------------- image folders


def test_an_image_folder_round_trips_with_sorted_class_names(tmp_path: Path) -> None:
    write_imagefolder(tmp_path, train=30, test=12, num_classes=3, size=24)
    assert detect_format(tmp_path) == "imagefolder"
    train, test, classes = load_dataset(tmp_path)
    assert classes == ["airplane", "automobile", "bird"]
    assert train[0][0].shape == (3, 24, 24)
    assert_images_and_labels(train, 30, 3)
    assert_images_and_labels(test, 12, 3)
    assert describe(tmp_path)["splits"]["train"]["per_class"] == dict.fromkeys(classes, 10)


def test_image_folder_pixels_match_the_files(tmp_path: Path) -> None:
    write_imagefolder(tmp_path, train=3, test=3, num_classes=1)
    first = sorted((tmp_path / "train" / "airplane").iterdir())[0]
    expected = np.asarray(Image.open(first).convert("RGB")).transpose(2, 0, 1) / 255
    train, _, _ = load_dataset(tmp_path)
    assert torch.allclose(train[0][0], torch.from_numpy(expected).float())


def test_jpeg_and_grayscale_images_are_read_as_rgb(tmp_path: Path) -> None:
    write_imagefolder(tmp_path, train=4, test=2, num_classes=2, suffix=".jpg")
    Image.new("L", (32, 32), 128).save(tmp_path / "train" / "bird.JPEG")  # not in a class
    Image.new("L", (32, 32), 128).save(tmp_path / "test" / "airplane" / "gray.jpeg")
    train, test, _ = load_dataset(tmp_path)
    assert (len(train), len(test)) == (4, 3)
    assert {train[i][0].shape for i in range(4)} | {test[i][0].shape for i in range(3)} == {
        (3, 32, 32)}  # fmt: skip


def test_a_dataset_one_directory_down_is_found(tmp_path: Path) -> None:
    write_imagefolder(tmp_path / "flowers", train=6, test=3)
    (tmp_path / "README.txt").write_text("my flowers")
    assert detect_format(tmp_path) == "imagefolder"
    assert len(load_dataset(tmp_path)[0]) == 6


def test_an_image_of_another_size_is_brought_to_the_first_ones(tmp_path: Path) -> None:
    write_imagefolder(tmp_path, train=6, test=3, num_classes=2)
    Image.new("RGB", (40, 30)).save(tmp_path / "test" / "automobile" / "odd.png")
    _, test, _ = load_dataset(tmp_path)
    assert {test[i][0].shape for i in range(len(test))} == {(3, 32, 32)}


def test_an_unreadable_image_is_named(tmp_path: Path) -> None:
    write_imagefolder(tmp_path, train=6, test=3, num_classes=2)
    (tmp_path / "train" / "bird.png").write_bytes(b"ignored, not in a class folder")
    (tmp_path / "train" / "airplane" / "broken.png").write_bytes(b"not a png")
    train, _, _ = load_dataset(tmp_path)  # read on demand: found when it is read
    with pytest.raises(DatasetError, match=r"train/airplane/broken\.png is not a readable image"):
        [train[i] for i in range(len(train))]


def test_a_test_class_missing_from_train_is_refused(tmp_path: Path) -> None:
    write_imagefolder(tmp_path, train=6, test=3, num_classes=2)
    (tmp_path / "test" / "zebra").mkdir()
    with pytest.raises(DatasetError, match="test/ has classes that train/ lacks: zebra"):
        load_dataset(tmp_path)


# ------------------------------------------------------------------------- npz


def test_an_npz_round_trips_from_nhwc_uint8_to_nchw_float(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "data.npz", train=40, test=20, num_classes=4, size=16)
    assert detect_format(tmp_path) == "npz"
    assert detect_format(path) == "npz"
    train, test, classes = load_dataset(tmp_path)
    assert classes == list(CIFAR10_CLASSES[:4])
    assert train.tensors[0].shape == (40, 3, 16, 16)
    assert_images_and_labels(train, 40, 4)
    assert_images_and_labels(test, 20, 4)
    with np.load(path) as archive:
        expected = archive["x_train"][0].transpose(2, 0, 1) / 255
    assert torch.allclose(train.tensors[0][0], torch.from_numpy(expected).float())


def test_npz_floats_are_kept_as_stored_and_names_default_to_indices(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(12, 28, 28)).astype(np.float64)
    y = (np.arange(12) % 3).reshape(12, 1)
    np.savez(tmp_path / "mnistish.npz", x_train=x, y_train=y, x_test=x[:4], y_test=y[:4])
    train, test, classes = load_dataset(tmp_path)
    assert classes == ["0", "1", "2"]
    assert train.tensors[0].shape == (12, 1, 28, 28)
    assert train.tensors[0].dtype == torch.float32
    assert torch.allclose(train.tensors[0][:, 0], torch.from_numpy(x).float())
    assert test.tensors[1].tolist() == [0, 1, 2, 0]


def test_an_npz_missing_arrays_says_which(tmp_path: Path) -> None:
    np.savez(tmp_path / "half.npz", x_train=np.zeros((2, 4)), y_train=np.zeros(2, np.int64))
    with pytest.raises(
        DatasetError, match=r"half\.npz lacks x_test, y_test; found x_train, y_train"
    ):
        load_dataset(tmp_path)


def test_an_npz_holding_pickled_objects_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    objects = np.array([Exploit(f"touch {marker}")], dtype=object)
    y = np.zeros(1, np.int64)
    np.savez(tmp_path / "evil.npz", x_train=objects, y_train=y, x_test=objects, y_test=y)
    with pytest.raises(DatasetError, match=r"evil\.npz is not a readable \.npz archive"):
        load_dataset(tmp_path)
    assert not marker.exists()


def test_float_labels_in_an_npz_are_refused(tmp_path: Path) -> None:
    x, y = np.zeros((2, 4), np.float32), np.array([0.5, 1.0])
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    with pytest.raises(DatasetError, match="y_train must hold integer class indices"):
        load_dataset(tmp_path)


def test_labels_beyond_the_class_names_are_refused(tmp_path: Path) -> None:
    x, y = np.zeros((2, 4), np.float32), np.array([0, 5])
    names = np.array(["a", "b"])
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x, y_test=y, class_names=names)
    with pytest.raises(DatasetError, match=r"labels must lie in 0\.\.1, found 0\.\.5"):
        load_dataset(tmp_path)


def test_two_npz_files_are_refused(tmp_path: Path) -> None:
    write_npz(tmp_path / "a.npz", train=4, test=2)
    write_npz(tmp_path / "b.npz", train=4, test=2)
    with pytest.raises(
        DatasetError, match=r"Found 2 .npz files \(a.npz, b.npz\); keep exactly one"
    ):
        detect_format(tmp_path)


# ------------------------------------------------------------------------- untrusted pickles


class Exploit:
    """Unpickling this runs a shell command: what a hostile upload would hold."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.command,))


class EvalExploit:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (eval, ("__import__('os').getpid()",))


def test_it_refuses_a_pickle_that_calls_os_system(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    marker = tmp_path / "pwned"
    evil = {b"data": Exploit(f"touch {marker}"), b"labels": [0]}
    (out / "data_batch_1").write_bytes(pickle.dumps(evil, protocol=2))
    with pytest.raises(
        DatasetError, match=r"data_batch_1: the pickle refers to posix\.system.*refused"
    ):
        load_dataset(tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_it_refuses_a_pickle_that_calls_eval_at_any_protocol(tmp_path: Path, protocol: int) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    (out / "batches.meta").write_bytes(pickle.dumps(EvalExploit(), protocol=protocol))
    with pytest.raises(
        DatasetError, match=r"batches\.meta: the pickle refers to (__builtin__|builtins)\.eval"
    ):
        load_dataset(tmp_path)


def test_it_refuses_codecs_other_than_latin1(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    meta = (out / "batches.meta").read_bytes()
    (out / "batches.meta").write_bytes(meta.replace(b"latin1", b"zlib__", 1))
    with pytest.raises(
        DatasetError, match=r"batches\.meta: the pickle asks for the codec 'zlib__'; refused"
    ):
        load_dataset(tmp_path)


def test_a_truncated_pickle_is_a_dataset_error(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    (out / "test_batch").write_bytes((out / "test_batch").read_bytes()[:100])
    with pytest.raises(DatasetError, match="test_batch is not a readable CIFAR pickle"):
        load_dataset(tmp_path)


def test_a_batch_with_the_wrong_row_length_is_refused(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    batch = {b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}
    (out / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DatasetError, match="rows must hold 3072 values"):
        load_dataset(tmp_path)


def test_a_batch_without_labels_names_the_missing_key(tmp_path: Path) -> None:
    out = write_cifar10(tmp_path, train=10, test=10)
    (out / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8)}))
    with pytest.raises(DatasetError, match="test_batch: the key 'labels' is missing"):
        load_dataset(tmp_path)


# ------------------------------------------------------------------------- nothing found


def test_an_empty_directory_gives_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as caught:
        detect_format(tmp_path)
    message = str(caught.value)
    assert "No supported dataset found" in message
    assert "data_batch_1" in message and "train/<class>/*.png" in message and ".npz" in message
    assert "Found: an empty directory" in message


def test_an_unrecognised_upload_lists_what_was_found(tmp_path: Path) -> None:
    (tmp_path / "cifar").mkdir()
    (tmp_path / "cifar" / "data_batch_1").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(DatasetError, match=r"Found: cifar/, cifar/data_batch_1, notes\.txt\."):
        describe(tmp_path)


def test_a_missing_directory_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="is not a directory"):
        load_dataset(tmp_path / "nowhere")
