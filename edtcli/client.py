"""A small client for EDT's REST API over the standard library (no dependency to install).

Every failure becomes ``CliError`` carrying the server's own message, so that the CLI can
print it and exit 1.
"""

from __future__ import annotations

import json
import mimetypes
import shutil
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

API = "/api/v1/"
TIMEOUT = 60.0


class CliError(Exception):
    """A message for the user; ``status`` is the HTTP status when the server answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Client:
    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token

    # Requests ------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """``method`` on ``/api/v1/<path>``; a JSON ``body`` unless it is bytes; returns
        the decoded JSON answer (None for an empty one)."""
        data, sent = body, dict(headers or {})
        if body is not None and not isinstance(body, bytes):
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        with self.open(method, path, data, query, sent) as response:
            raw = response.read()
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise CliError(f"{self.url} did not answer JSON: is it an EDT server?") from None

    def open(
        self,
        method: str,
        path: str,
        data: bytes | None = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = TIMEOUT,
    ) -> Any:
        """The raw response (a context manager); errors raised as ``CliError``."""
        url = self.endpoint(path, query)
        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        request.add_header("Accept", "application/json")
        if self.token:
            request.add_header("Authorization", f"Token {self.token}")
        try:
            return urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            raise CliError(error_message(exc), exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CliError(f"cannot reach EDT at {self.url} ({reason})") from None

    def endpoint(self, path: str, query: dict[str, Any] | None = None) -> str:
        url = self.url + API + path.lstrip("/")
        given = {k: v for k, v in (query or {}).items() if v is not None}
        return url + ("?" + urllib.parse.urlencode(given) if given else "")

    def pages(self, path: str, query: dict[str, Any] | None = None) -> Iterator[Any]:
        """Every item of a paged list, following ``next``."""
        page = self.call("GET", path, query={"limit": 1000, **(query or {})})
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            offset = urllib.parse.parse_qs(urllib.parse.urlsplit(page["next"]).query)["offset"]
            more = {"limit": 1000, **(query or {}), "offset": offset[0]}
            page = self.call("GET", path, query=more)

    # Files ---------------------------------------------------------------------------------

    def post_file(self, path: str, fields: dict[str, str], file: Path) -> Any:
        """A multipart POST of ``fields`` and ``file`` (field ``file``), read into memory:
        for small files (model code)."""
        boundary = uuid.uuid4().hex
        parts = []
        for name, value in fields.items():
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                         f"{value}\r\n".encode())  # fmt: skip
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{file.name}"\r\nContent-Type: {kind}\r\n\r\n'.encode()
            + file.read_bytes()
            + f"\r\n--{boundary}--\r\n".encode()
        )
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        with self.open("POST", path, b"".join(parts), headers=headers) as response:
            return json.loads(response.read())

    def download(self, path: str, dest: Path, progress: Callable[[int, int], None]) -> int:
        """Stream ``path`` into ``dest`` (through ``dest.part``); returns the bytes written."""
        partial = dest.with_name(dest.name + ".part")
        done = 0
        with self.open("GET", path, timeout=TIMEOUT) as response, partial.open("wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            while chunk := response.read(1 << 20):
                out.write(chunk)
                done += len(chunk)
                progress(done, total)
        shutil.move(partial, dest)
        return done

    def put_chunk(self, path: str, source: BinaryIO, start: int, size: int, total: int) -> Any:
        source.seek(start)
        chunk = source.read(size)
        end = start + len(chunk) - 1
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Range": f"bytes {start}-{end}/{total}",
        }
        with self.open("PUT", path, chunk, headers=headers) as response:
            return json.loads(response.read())


def error_message(exc: urllib.error.HTTPError) -> str:
    """The server's ``error`` (and the offending fields), else the HTTP reason."""
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        body = {}
    message = body.get("error") if isinstance(body, dict) else None
    return str(message) if message else f"HTTP {exc.code} {exc.reason}"
