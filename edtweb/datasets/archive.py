"""Safe extraction of uploaded dataset archives: .zip, .tar and .tar.gz.

Uploads are untrusted. `extract` refuses, with a message a data scientist can act on, anything
that could land outside the destination (absolute paths, `..`, links), anything that is not a
plain file or folder, and archives that unpack to too much: too many entries, too many bytes,
or too many bytes for their own size (a compression bomb). Sizes are the bytes the
decompressor actually produces, never what the headers claim, and every limit is checked
before a chunk is written. The archive is unpacked into a hidden folder beside `dest` and
renamed into place only when all of it succeeded; on any error that folder is removed.

Pure Python, no Django: the checks are tested without a database.
"""

from __future__ import annotations

import gzip
import io
import lzma
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol, Self

GiB = 1 << 30
CHUNK = 1 << 20

# Errors the decompressors raise on a cut or corrupted archive (disk errors are not here).
_DAMAGE = (
    zipfile.BadZipFile,
    tarfile.TarError,
    gzip.BadGzipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    NotImplementedError,  # zipfile, for a version or method field it does not know
    UnicodeDecodeError,  # zipfile, for a name flagged UTF-8 that is not
)
# Tar entries whose data tarfile reads into memory in one piece: pax and GNU long names.
_TAR_METADATA_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
_MAX_TAR_METADATA = 1 << 20
_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
_OTHER_FORMATS = (
    (b"BZh", "the signature of a bzip2 file, which is not supported"),
    (b"\xfd7zXZ\x00", "the signature of an xz file, which is not supported"),
    (b"7z\xbc\xaf\x27\x1c", "the signature of a 7-Zip archive, which is not supported"),
    (b"Rar!", "the signature of a RAR archive, which is not supported"),
)
_UPLOAD_HINT = "Upload a .zip, .tar or .tar.gz file."


class ArchiveError(ValueError):
    """An upload that cannot be extracted; the message says why and what to do about it."""


@dataclass(frozen=True)
class Limits:
    """What one archive may unpack to. Byte counts are of file contents."""

    max_members: int = 200_000
    max_total_bytes: int = 4 * GiB
    max_member_bytes: int = 4 * GiB
    max_ratio: float = 200.0
    # Below this many unpacked bytes the ratio is not checked: a tiny archive of repetitive
    # text legitimately compresses better than `max_ratio`, and cannot be a bomb.
    ratio_grace_bytes: int = 1 << 20


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class ExtractResult:
    members: int  # files and folders written
    bytes_written: int


def detect_kind(path: Path, name: str | None = None) -> str:
    """Return "zip", "tar" or "tar.gz" from the file's first bytes; its name is not trusted.
    ``name`` is what errors call the file (the uploader's name for it; else the path's)."""
    name = name or path.name
    with path.open("rb") as f:
        head = f.read(512)
    check_start(head, name)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        if _is_tar_header(_gunzip_head(path)):
            return "tar.gz"
        raise ArchiveError(
            f"{name} is gzip-compressed but does not contain a tar archive. {_UPLOAD_HINT}"
        )
    return "tar"


def check_start(head: bytes, name: str) -> None:
    """Refuse at once a file whose first 512 bytes are no zip, gzip or tar start (an upload
    is checked on its first chunk, not after its last)."""
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x1f\x8b")) or _is_tar_header(head):
        return
    raise ArchiveError(
        f"{name} is not a zip, tar or tar.gz archive ({_describe_start(head)}). {_UPLOAD_HINT}"
    )


def extract(
    path: Path,
    dest: Path,
    limits: Limits = DEFAULT_LIMITS,
    progress: Callable[[int, int], None] | None = None,
    name: str | None = None,
) -> ExtractResult:
    """Unpack the archive at `path` into the new folder `dest`, whose parent must exist.

    `progress(done, total)` is called now and then with the archive bytes read so far and
    the archive's size; the last call has done == total. It may raise to cancel.
    Raises ArchiveError for anything refused; on any error nothing is left behind.
    """
    kind = detect_kind(path, name)
    if dest.exists() or dest.is_symlink():
        raise FileExistsError(f"{dest} already exists; extract into a new folder")
    size = path.stat().st_size
    budget = _Budget(limits, size)
    reporter = _Progress(size, progress)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        tree = _Tree(tmp)
        with path.open("rb") as f:
            raw = _CountingReader(f, reporter.advance)
            try:
                if kind == "zip":
                    _extract_zip(raw, tree, budget)
                else:
                    _extract_tar(raw, kind == "tar.gz", tree, budget)
            except _DAMAGE as e:
                raise _damaged(str(e) or type(e).__name__) from e
        tmp.chmod(0o755)  # mkdtemp's 0700: learners run as another user and read it
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    reporter.finish()
    return ExtractResult(tree.members, budget.written)


# -- Formats ------------------------------------------------------------------------------


def _extract_zip(raw: _CountingReader, tree: _Tree, budget: _Budget) -> None:
    with zipfile.ZipFile(raw) as zf:
        infos = zf.infolist()
        if len(infos) > budget.limits.max_members:
            raise ArchiveError(_too_many_members(budget.limits.max_members))
        for info in infos:
            budget.count_entry()
            name = info.orig_filename.replace("\\", "/")  # some Windows tools write backslashes
            rel = _member_path(name)
            if rel is None:
                continue
            _check_zip_entry(name, info)
            if name.endswith("/"):
                tree.add_dir(rel, name)
                continue
            with zf.open(info) as member, tree.create(rel, name) as out:
                _copy(_CountingReader(member, budget.produce), out, name, budget)


def _check_zip_entry(name: str, info: zipfile.ZipInfo) -> None:
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind == stat.S_IFLNK:
        raise ArchiveError(_link_message(name, "a symbolic link", "zip -r without --symlinks"))
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise ArchiveError(_special_message(name))
    if info.flag_bits & 0x1:
        raise ArchiveError(
            f"{name!r} is password-protected. Create the archive without a password."
        )
    if info.compress_type not in _ZIP_METHODS:
        raise ArchiveError(
            f"{name!r} uses a compression method this server cannot read "
            f"(zip method {info.compress_type}). Create the archive with ordinary "
            "zip (deflate) compression."
        )


def _extract_tar(raw: _CountingReader, compressed: bool, tree: _Tree, budget: _Budget) -> None:
    # Decompress ourselves rather than with "r|gz" so that every byte produced, headers and
    # skipped entries included, counts towards the ratio.
    source: _Source = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
    stream = _CountingReader(source, budget.produce)
    with tarfile.open(fileobj=stream, mode="r|", tarinfo=_GuardedTarInfo, bufsize=CHUNK) as tf:
        for member in tf:
            budget.count_entry()
            rel = _member_path(member.name)
            if rel is None:
                continue
            _check_tar_entry(member)
            if member.isdir():
                tree.add_dir(rel, member.name)
                continue
            src = tf.extractfile(member)
            assert src is not None  # a regular file always has a reader
            with src, tree.create(rel, member.name) as out:
                _copy(src, out, member.name, budget)
    while stream.read(CHUNK):  # reaching the end makes gzip verify its checksum
        pass


def _check_tar_entry(member: tarfile.TarInfo) -> None:
    name = member.name
    if member.issym():
        hint = f"tar without links (tar -h), so it holds the file {member.linkname!r} itself"
        raise ArchiveError(_link_message(name, "a symbolic link", hint))
    if member.islnk():
        hint = f"tar --hard-dereference, so it holds a copy of {member.linkname!r}"
        raise ArchiveError(_link_message(name, "a hard link", hint))
    if member.ischr() or member.isblk() or member.isfifo():
        raise ArchiveError(_special_message(name))
    if member.issparse():
        raise ArchiveError(f"{name!r} is a sparse file. Create the archive without --sparse.")
    if not (member.isfile() or member.isdir()):
        raise ArchiveError(_special_message(name))


class _GuardedTarInfo(tarfile.TarInfo):
    """Refuses bad entry headers, which tarfile would take for the end of the archive, and
    oversized pax and GNU long-name entries, which it would read into memory."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        try:
            return super().frombuf(buf, encoding, errors)
        except tarfile.HeaderError as e:
            if len(buf) == tarfile.BLOCKSIZE and buf.count(0) == tarfile.BLOCKSIZE:
                raise  # a zero block: the archive's proper end
            if not buf:
                raise _damaged("it ends before its end-of-archive marker") from e
            if len(buf) < tarfile.BLOCKSIZE:
                raise _damaged("it ends inside an entry header") from e
            raise _damaged(f"an entry header is invalid ({e})") from e

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _TAR_METADATA_TYPES and self.size > _MAX_TAR_METADATA:
            raise ArchiveError(
                f"the archive has a {_size(self.size)} metadata header (a name or pax record); "
                "it is damaged or hostile. Create the archive again with tar."
            )
        # tarfile's private dispatch on entry type; typeshed does not declare it.
        return super()._proc_member(archive)  # type: ignore[misc,no-any-return]


def _is_tar_header(block: bytes) -> bool:
    """True if `block` starts with a tar header: ustar magic, or a valid v7 checksum."""
    if len(block) < 512:
        return False
    if block[257:262] == b"ustar":
        return True
    try:
        stored = int(block[148:156].replace(b"\0", b" ").strip() or b"-1", 8)
    except ValueError:
        return False
    return stored == sum(block[:148]) + 8 * ord(" ") + sum(block[156:512])


def _gunzip_head(path: Path) -> bytes:
    try:
        with gzip.open(path, "rb") as f:
            return f.read(512)
    except _DAMAGE as e:
        raise _damaged(str(e) or type(e).__name__) from e


def _describe_start(head: bytes) -> str:
    if not head:
        return "it is empty"
    for magic, what in _OTHER_FORMATS:
        if head.startswith(magic):
            return f"it starts with {what}"
    first = head[:20]
    if all(32 <= b < 127 or b in b"\t\r\n" for b in first):
        return f"it starts with {first.decode('ascii')!r}"
    return f"it starts with the bytes {first[:8].hex(' ')}"


# -- Names and the tree being written -----------------------------------------------------


def _member_path(name: str) -> PurePosixPath | None:
    """The safe relative path for an entry, or None for one skipped quietly (the archive's
    root folder, macOS `__MACOSX/` and `.DS_Store` litter)."""
    if "\0" in name:
        raise ArchiveError(f"{name!r} has a NUL character in its name. Rename it.")
    if name.startswith("/"):
        raise ArchiveError(
            f"{name!r} has an absolute path; an archive may hold relative paths only. "
            "Create it from inside the dataset folder "
            "(for example: cd data && zip -r ../data.zip .)."
        )
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(
            f"{name!r} contains '..', which would place it outside the dataset folder. "
            "Create the archive from inside the dataset folder, without '..' in any path."
        )
    if not parts or parts[0] == "__MACOSX" or parts[-1] == ".DS_Store":
        return None
    return PurePosixPath(*parts)


class _Tree:
    """The folders and files written so far under `root`; refuses to overwrite any of them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: set[PurePosixPath] = set()
        self.dirs: set[PurePosixPath] = set()
        self.members = 0

    def add_dir(self, rel: PurePosixPath, name: str) -> None:
        self._check_parents(rel, name)
        if rel in self.files:
            raise ArchiveError(_conflict_message(name))
        if rel not in self.dirs:
            self._make_dir(rel)
            self.members += 1

    def create(self, rel: PurePosixPath, name: str) -> BinaryIO:
        """Open a new file for writing; "x" mode also guards against a missed duplicate."""
        self._check_parents(rel, name)
        if rel in self.files:
            raise ArchiveError(
                f"{name!r} appears twice in the archive, and the second copy would overwrite "
                "the first. Remove the duplicate and create the archive again."
            )
        if rel in self.dirs:
            raise ArchiveError(_conflict_message(name))
        self._make_dir(rel.parent)
        self.files.add(rel)
        self.members += 1
        return (self.root / rel).open("xb")

    def _check_parents(self, rel: PurePosixPath, name: str) -> None:
        if any(parent in self.files for parent in rel.parents):
            raise ArchiveError(_conflict_message(name))

    def _make_dir(self, rel: PurePosixPath) -> None:
        (self.root / rel).mkdir(parents=True, exist_ok=True)
        self.dirs.update([rel, *rel.parents])


# -- Limits and counting ------------------------------------------------------------------


class _Budget:
    """Running totals for one extraction; each method raises once a limit is passed."""

    def __init__(self, limits: Limits, archive_bytes: int) -> None:
        self.limits = limits
        self.archive_bytes = archive_bytes
        self.entries = 0
        self.produced = 0  # bytes out of the decompressor
        self.written = 0  # file bytes written

    def count_entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_members:
            raise ArchiveError(_too_many_members(self.limits.max_members))

    def produce(self, n: int) -> None:
        self.produced += n
        allowed = max(self.limits.max_ratio * self.archive_bytes, self.limits.ratio_grace_bytes)
        if self.produced > allowed:
            raise ArchiveError(
                f"the archive unpacks to more than {self.limits.max_ratio:g} times its own size "
                f"({_size(self.produced)} so far from {_size(self.archive_bytes)}), which is "
                "what a compression bomb looks like, so extraction was stopped. If your data "
                "really is this repetitive, store it in a less compressible form and upload again."
            )

    def write(self, name: str, member_bytes: int, n: int) -> None:
        self.written += n
        if member_bytes > self.limits.max_member_bytes:
            raise ArchiveError(
                f"{name!r} unpacks to more than {_size(self.limits.max_member_bytes)}, "
                "the limit for one file. Split it into smaller files."
            )
        if self.written > self.limits.max_total_bytes:
            raise ArchiveError(
                f"the archive unpacks to more than {_size(self.limits.max_total_bytes)}, the "
                "limit for one dataset. Upload a smaller dataset, or ask an administrator to "
                "raise the limit."
            )


class _Source(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...
    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def tell(self) -> int: ...
    def seekable(self) -> bool: ...


class _CountingReader:
    """A read-only file that passes the size of every read to `on_read` (which may raise)."""

    def __init__(self, inner: _Source, on_read: Callable[[int], None]) -> None:
        self._inner = inner
        self._on_read = on_read

    def read(self, size: int = -1, /) -> bytes:
        data = self._inner.read(size)
        self._on_read(len(data))
        return data

    def seek(self, offset: int, whence: int = 0, /) -> int:
        if whence == io.SEEK_SET and offset < 0:  # a corrupt zip offset; the OS says EINVAL
            raise _damaged("an entry points before the start of the file")
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def seekable(self) -> bool:
        return self._inner.seekable()

    def write(self, data: bytes, /) -> int:
        raise io.UnsupportedOperation("read-only")

    def close(self) -> None:
        """The owner of the inner file closes it."""


class _Progress:
    """Calls `callback(done, total)` at most about a hundred times, and once at the end."""

    def __init__(self, total: int, callback: Callable[[int, int], None] | None) -> None:
        self.total = total
        self.callback = callback
        self.done = 0
        self.reported = 0
        self.step = max(total // 100, 1)

    def advance(self, n: int) -> None:
        self.done = min(self.done + n, self.total)
        if self.callback is not None and self.done - self.reported >= self.step:
            self.reported = self.done
            self.callback(self.done, self.total)

    def finish(self) -> None:
        if self.callback is not None and self.reported != self.total:
            self.callback(self.total, self.total)


def _copy(src: _Source, out: BinaryIO, name: str, budget: _Budget) -> None:
    size = 0
    while chunk := src.read(CHUNK):
        size += len(chunk)
        budget.write(name, size, len(chunk))
        out.write(chunk)


# -- Messages -----------------------------------------------------------------------------


def _damaged(detail: str) -> ArchiveError:
    return ArchiveError(
        f"the archive is truncated or damaged: {detail}. Upload it again; if that fails too, "
        "create the archive again."
    )


def _too_many_members(limit: int) -> str:
    return (
        f"the archive has more than {limit:,} entries (files and folders), the limit for one "
        "dataset. Pack small files together (for example into one .npz file) or split the "
        "dataset."
    )


def _link_message(name: str, what: str, hint: str) -> str:
    return f"{name!r} is {what}; datasets may not contain links. Create the archive with {hint}."


def _special_message(name: str) -> str:
    return (
        f"{name!r} is a device file, pipe or other special file; datasets may contain only "
        "plain files and folders. Remove it and create the archive again."
    )


def _conflict_message(name: str) -> str:
    return (
        f"{name!r} is both a file and a folder in the archive, so one would overwrite the "
        "other. Rename one of them and create the archive again."
    )


def _size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} TiB"
