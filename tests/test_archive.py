"""Safe extraction of uploaded archives: every hostile archive is built here, in code.

Each refusal is checked three ways: the message says what is wrong, nothing appeared anywhere
under the test's folder (so nothing escaped `dest`), and no half-extracted folder is left.
"""

from __future__ import annotations

import io
import os
import re
import stat
import struct
import tarfile
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edtweb.datasets.archive import ArchiveError, Limits, detect_kind, extract

MiB = 1 << 20
KINDS = ["zip", "tar", "tar.gz"]


@dataclass(frozen=True)
class Entry:
    name: str
    data: bytes = b""
    kind: str = "file"  # file, dir, symlink, hardlink, fifo, chardev
    target: str = ""


TAR_TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "fifo": tarfile.FIFOTYPE,
    "chardev": tarfile.CHRTYPE,
}
ZIP_MODES = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}


def tar_bytes(entries: list[Entry], compressed: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if compressed else "w") as tf:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = TAR_TYPES[e.kind]
            info.linkname = e.target
            info.size = len(e.data)
            tf.addfile(info, io.BytesIO(e.data) if e.kind == "file" else None)
    return buf.getvalue()


def zip_bytes(entries: list[Entry]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicates we mean to write
        for e in entries:
            info = zipfile.ZipInfo(e.name)
            info.external_attr = (ZIP_MODES[e.kind] | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, e.target.encode() if e.kind == "symlink" else e.data)
    return buf.getvalue()


def build(kind: str, entries: list[Entry]) -> bytes:
    return zip_bytes(entries) if kind == "zip" else tar_bytes(entries, kind == "tar.gz")


def deflate_zeros(total: int, prefix: bytes = b"") -> bytes:
    """Raw deflate of `prefix` then `total` zero bytes (a multiple of 1 MiB), in milliseconds.

    A fully flushed block does not refer to earlier data, so one compressed MiB of zeros can
    simply be repeated; an empty final block ends the stream.
    """
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(MiB)) + c.flush(zlib.Z_FULL_FLUSH)
    return head + block * (total // MiB) + zlib.compressobj(9, zlib.DEFLATED, -15).flush()


def zip_bomb(size: int) -> bytes:
    """One deflated member of `size` zero bytes. Its CRC is left at 0 (working it out takes
    longer than the test): extraction must stop long before it would be checked."""
    name, data = b"zeros.bin", deflate_zeros(size)
    fields = (8, 0, 0, 0, len(data), size, len(name))
    local = struct.pack("<4s5HL2L2H", b"PK\x03\x04", 20, 0, *fields, 0) + name
    central = struct.pack("<4s6HL2L5H2L", b"PK\x01\x02", 20, 20, 0, *fields, 0, 0, 0, 0, 0, 0)
    central += name
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local + data), 0)
    return local + data + central + end


def tar_gz_bomb(size: int) -> bytes:
    """A .tar.gz of one member of `size` zero bytes (the zeros after it end the tar); its CRC
    is left at 0 like the zip bomb's."""
    info = tarfile.TarInfo("zeros.bin")
    info.size = size
    header = info.tobuf(tarfile.GNU_FORMAT)
    gz_header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    trailer = struct.pack("<2L", 0, (len(header) + size + MiB) & 0xFFFFFFFF)
    return gz_header + deflate_zeros(size + MiB, header) + trailer


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def refuse(tmp_path: Path) -> Callable[..., ArchiveError]:
    """Extract `data` into a fresh dest; return the refusal after checking nothing was left."""

    def run(data: bytes, suffix: str = ".zip", limits: Limits | None = None) -> ArchiveError:
        archive = tmp_path / f"upload{suffix}"
        archive.write_bytes(data)
        (tmp_path / "datasets").mkdir(exist_ok=True)
        dest = tmp_path / "datasets" / "d1"
        before = snapshot(tmp_path)
        with pytest.raises(ArchiveError) as caught:
            extract(archive, dest, limits or Limits())
        assert snapshot(tmp_path) == before
        assert not dest.exists()
        return caught.value

    return run


NESTED = [
    Entry("data/", kind="dir"),
    Entry("data/train/", kind="dir"),
    Entry("data/train/cat/0.png", b"cat-0"),
    Entry("data/train/dog/1.png", b"dog-1" * 100),
    Entry("data/test/cat/2.png", b""),
    Entry("__MACOSX/data/._0.png", b"resource fork"),
    Entry("data/.DS_Store", b"finder"),
]
NESTED_TREE = {
    "data", "data/train", "data/train/cat", "data/train/cat/0.png", "data/train/dog",
    "data/train/dog/1.png", "data/test", "data/test/cat", "data/test/cat/2.png",
}  # fmt: skip


# -- Happy paths --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_it_extracts_nested_folders_and_skips_macos_litter(kind: str, tmp_path: Path) -> None:
    archive = tmp_path / "upload.bin"
    archive.write_bytes(build(kind, NESTED))
    calls: list[tuple[int, int]] = []

    result = extract(
        archive, tmp_path / "d1", progress=lambda done, total: calls.append((done, total))
    )

    dest = tmp_path / "d1"
    assert (dest / "data/train/cat/0.png").read_bytes() == b"cat-0"
    assert (dest / "data/train/dog/1.png").read_bytes() == b"dog-1" * 100
    assert (dest / "data/test/cat/2.png").read_bytes() == b""
    assert snapshot(dest) == NESTED_TREE
    assert result.members == 5  # two folders listed in the archive, three files
    assert result.bytes_written == 5 + 500
    assert snapshot(tmp_path) == {"upload.bin", "d1", *(f"d1/{p}" for p in snapshot(dest))}
    assert calls[-1] == (archive.stat().st_size, archive.stat().st_size)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


@pytest.mark.parametrize("kind", KINDS)
def test_it_detects_the_kind_from_content_not_name(kind: str, tmp_path: Path) -> None:
    archive = tmp_path / "misnamed.txt"
    archive.write_bytes(build(kind, NESTED))
    assert detect_kind(archive) == kind


def test_it_does_not_apply_the_ratio_to_tiny_archives(tmp_path: Path) -> None:
    archive = tmp_path / "notes.zip"
    archive.write_bytes(zip_bytes([Entry("notes.txt", b"a" * 500_000)]))
    assert archive.stat().st_size * 200 < 500_000

    assert extract(archive, tmp_path / "d1").bytes_written == 500_000


def test_it_does_not_keep_permission_bits_from_the_archive(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("run.sh")
        info.mode = 0o6777
        tf.addfile(info, io.BytesIO(b""))
    archive = tmp_path / "upload.tar"
    archive.write_bytes(buf.getvalue())

    extract(archive, tmp_path / "d1")

    assert (tmp_path / "d1/run.sh").stat().st_mode & 0o7000 == 0


# -- Not an archive -----------------------------------------------------------------------


def test_it_refuses_a_text_file_renamed_zip(refuse: Callable[..., ArchiveError]) -> None:
    error = refuse(b"hello, this is not an archive\n")
    assert "upload.zip is not a zip, tar or tar.gz archive (it starts with 'hello, this is not" in (
        str(error)
    )


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "(it is empty)"),
        (b"\x89PNG\r\n\x1a\n" + bytes(100), "(it starts with the bytes 89 50 4e 47 0d 0a 1a 0a)"),
        (b"Rar!\x1a\x07\x00" + bytes(100), "signature of a RAR archive, which is not supported"),
    ],
    ids=["empty", "png", "rar"],
)
def test_it_says_what_a_non_archive_starts_with(
    data: bytes, says: str, refuse: Callable[..., ArchiveError]
) -> None:
    assert says in str(refuse(data))


def test_it_refuses_a_gzip_that_holds_no_tar(refuse: Callable[..., ArchiveError]) -> None:
    import gzip

    error = refuse(gzip.compress(b"just some text " * 100), ".tar.gz")
    assert "gzip-compressed but does not contain a tar archive" in str(error)


# -- Hostile entries ----------------------------------------------------------------------

HOSTILE = [
    ("traversal", KINDS, [Entry("ok.txt", b"1"), Entry("../evil", b"x")], "contains '..'"),
    ("deep-traversal", KINDS, [Entry("a/b/../../../evil", b"x")], "contains '..'"),
    ("symlink", KINDS, [Entry("link", kind="symlink", target="/etc")], "is a symbolic link"),
    ("hardlink", ["tar", "tar.gz"], [Entry("a", b"1"), Entry("b", kind="hardlink", target="a")],
     "is a hard link"),
    ("fifo", ["tar", "tar.gz"], [Entry("pipe", kind="fifo")], "device file, pipe"),
    ("device", ["tar", "tar.gz"], [Entry("null", kind="chardev")], "device file, pipe"),
    ("duplicate", KINDS, [Entry("a.txt", b"1"), Entry("a.txt", b"2")], "appears twice"),
    ("file-then-folder", KINDS, [Entry("a", b"1"), Entry("a/b", b"2")], "both a file and a folder"),
    ("folder-then-file", KINDS, [Entry("a/b", b"1"), Entry("a", b"2")], "both a file and a folder"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "entries", "says"),
    [(kind, entries, says) for _, kinds, entries, says in HOSTILE for kind in kinds],
    ids=[f"{name}-{kind}" for name, kinds, _, _ in HOSTILE for kind in kinds],
)
def test_it_refuses_hostile_entries_and_leaves_nothing(
    kind: str, entries: list[Entry], says: str, refuse: Callable[..., ArchiveError]
) -> None:
    assert says in str(refuse(build(kind, entries), ".upload"))


@pytest.mark.parametrize("kind", KINDS)
def test_it_refuses_an_absolute_path(
    kind: str, tmp_path: Path, refuse: Callable[..., ArchiveError]
) -> None:
    # Pointed inside the test's folder, so an escape would show in the snapshot.
    target = tmp_path / "datasets" / "evil"
    error = refuse(build(kind, [Entry(str(target), b"x")]), ".upload")
    assert "has an absolute path" in str(error)
    assert not target.exists()


def test_it_refuses_a_name_with_nul(refuse: Callable[..., ArchiveError]) -> None:
    # A non-ASCII name goes into a pax record, which keeps the NUL that tar headers cannot.
    error = refuse(tar_bytes([Entry("é.txt\0/../../evil", b"x")]), ".tar")
    assert "has a NUL character in its name" in str(error)


def test_it_refuses_a_password_protected_zip(refuse: Callable[..., ArchiveError]) -> None:
    # zipfile cannot encrypt, so set the "encrypted" flag in both headers by hand.
    data = bytearray(zip_bytes([Entry("secret.txt", b"x")]))
    data[6] |= 0x1
    data[data.index(b"PK\x01\x02") + 8] |= 0x1
    assert "is password-protected" in str(refuse(bytes(data)))


def test_it_refuses_an_oversized_pax_header(refuse: Callable[..., ArchiveError]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("a.txt")
        info.pax_headers = {"comment": "x" * (2 * MiB)}
        tf.addfile(info, io.BytesIO(b""))
    assert "metadata header" in str(refuse(buf.getvalue(), ".tar.gz"))


# -- Too much -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_it_refuses_too_many_members(kind: str, refuse: Callable[..., ArchiveError]) -> None:
    entries = [Entry(f"f{i}.txt", b"x") for i in range(11)]
    error = refuse(build(kind, entries), ".upload", Limits(max_members=10))
    assert "more than 10 entries (files and folders)" in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_it_refuses_more_bytes_than_the_cap(kind: str, refuse: Callable[..., ArchiveError]) -> None:
    entries = [Entry("a.bin", os.urandom(600)), Entry("b.bin", os.urandom(600))]
    error = refuse(build(kind, entries), ".upload", Limits(max_total_bytes=1000))
    assert "unpacks to more than 1000 bytes, the limit for one dataset" in str(error)


def test_it_refuses_a_member_over_the_file_cap(refuse: Callable[..., ArchiveError]) -> None:
    error = refuse(
        zip_bytes([Entry("big.bin", os.urandom(3000))]), limits=Limits(max_member_bytes=2048)
    )
    assert "'big.bin' unpacks to more than 2.0 KiB, the limit for one file" in str(error)


def test_it_stops_a_gigabyte_of_zeros_quickly(refuse: Callable[..., ArchiveError]) -> None:
    data = zip_bomb(1 << 30)
    assert len(data) < 2 * MiB

    error = refuse(data, ".zip")

    assert "more than 200 times its own size" in str(error)
    assert "compression bomb" in str(error)
    stopped_at = re.search(r"\(([\d.]+) MiB so far from 1\.0 MiB\)", str(error))
    assert stopped_at is not None
    # Stopped at 200 times the archive, before writing it, not after the whole gigabyte.
    assert float(stopped_at[1]) < 210


def test_it_stops_a_tar_gz_bomb_counting_every_byte_gzip_produces(
    refuse: Callable[..., ArchiveError],
) -> None:
    # A lower ratio keeps the test quick; the default one is exercised by the zip bomb above.
    error = refuse(tar_gz_bomb(1 << 30), ".tar.gz", Limits(max_ratio=20))

    stopped_at = re.search(r"more than 20 times its own size \(([\d.]+) MiB so far", str(error))
    assert stopped_at is not None
    assert float(stopped_at[1]) < 25


# -- Truncated and damaged ----------------------------------------------------------------

BIG = [Entry("a.bin", os.urandom(64 * 1024)), Entry("b.bin", os.urandom(64 * 1024))]


@pytest.mark.parametrize(
    ("kind", "cut"),
    [
        ("zip", lambda data: data[: len(data) // 2]),
        ("zip", lambda data: data[:-10]),
        ("tar", lambda data: data[: 512 + 64 * 1024 + 1000]),  # inside the second member
        ("tar", lambda data: data[: 512 + 64 * 1024]),  # right after the first member
        ("tar.gz", lambda data: data[: len(data) // 2]),
        ("tar.gz", lambda data: data[:-4]),  # the gzip trailer only
        ("zip", lambda data: data[:100] + bytes(200) + data[300:]),  # corrupted, not cut
    ],
    ids=["zip-half", "zip-end", "tar-mid-member", "tar-between-members", "tar.gz-half",
         "tar.gz-trailer", "zip-corrupt"],
)  # fmt: skip
def test_it_refuses_a_truncated_or_damaged_archive(
    kind: str, cut: Callable[[bytes], bytes], refuse: Callable[..., ArchiveError]
) -> None:
    error = refuse(cut(build(kind, BIG)), ".upload")
    assert "the archive is truncated or damaged: " in str(error)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(KINDS),
    edits=st.lists(
        st.tuples(st.sampled_from(["set", "cut", "drop"]), st.floats(0, 1), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
)
def test_a_damaged_archive_extracts_or_is_refused_cleanly(
    kind: str, edits: list[tuple[str, float, int]]
) -> None:
    data = bytearray(build(kind, NESTED))
    for op, where, value in edits:
        at = int(where * (len(data) - 1))
        if op == "set":
            data[at] = value
        elif op == "cut":
            del data[at:]
        else:
            del data[at : at + value % 50 + 1]
        if len(data) < 2:
            break
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "upload"
        archive.write_bytes(bytes(data))
        try:
            extract(archive, Path(tmp) / "d1")
        except ArchiveError:
            assert snapshot(Path(tmp)) == {"upload"}
        else:
            assert snapshot(Path(tmp)) - {"upload"} <= {"d1", *(f"d1/{p}" for p in NESTED_TREE)}


# -- The destination ----------------------------------------------------------------------


def test_it_refuses_to_extract_over_an_existing_folder(tmp_path: Path) -> None:
    archive = tmp_path / "upload.zip"
    archive.write_bytes(zip_bytes([Entry("a.txt", b"new")]))
    (tmp_path / "d1").mkdir()
    (tmp_path / "d1/a.txt").write_bytes(b"old")

    with pytest.raises(FileExistsError):
        extract(archive, tmp_path / "d1")

    assert snapshot(tmp_path) == {"upload.zip", "d1", "d1/a.txt"}
    assert (tmp_path / "d1/a.txt").read_bytes() == b"old"


def test_a_failing_progress_callback_cancels_and_cleans_up(tmp_path: Path) -> None:
    archive = tmp_path / "upload.tar"
    archive.write_bytes(tar_bytes(BIG))

    def cancel(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        extract(archive, tmp_path / "d1", progress=cancel)

    assert snapshot(tmp_path) == {"upload.tar"}
