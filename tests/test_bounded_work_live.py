"""An ordinary account cannot take the web down (edtweb/limits.py), against the run's live
EDT: its web process gets an address-space cap 1.5 GiB above its size (so that a
regression fails this test with a MemoryError in the web, not the machine with an
out-of-memory kill), then one user sends every oversized request at once. Each answers a
4xx within a second, the web's resident memory stays within a few hundred MiB of its start,
and the same process still answers afterwards: it never died nor was restarted."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.harness.processes import PROJECT_DIR, subprocess_env
from tests.harness.stack import LiveEdt
from tests.harness.waiting import bound, wait_for

MiB = 1024**2
USER = "trudy"  # a user of this module's own: the live EDT is shared with other modules
DEEP = "[" * 50_000 + "]" * 50_000
WMLA = "/platform/rest/deeplearning/v1/hypersearch"


def web_process(live: LiveEdt) -> psutil.Process:
    """The live EDT's web: its launcher's daphne child on the EDT's port."""
    assert live.launcher is not None
    port = live.url.rsplit(":", 1)[1]
    for child in psutil.Process(live.launcher.pid).children(recursive=True):
        line = child.cmdline()
        if "daphne" in line and port in line:
            return child
    raise AssertionError(f"no web process on port {port}")


def peak_rss(process: psutil.Process) -> int:
    """The most resident memory the process has had (VmHWM), in bytes."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def capped(live: LiveEdt) -> Iterator[dict[str, Any]]:
    """The live web under an address-space cap, and an account with a READY dataset and a
    VALID model to name in sweeps (rows of the live EDT's database, written as the harness
    writes its users)."""
    web = web_process(live)
    soft, hard = resource.prlimit(web.pid, resource.RLIMIT_AS)
    cap = web.memory_info().vms + 1536 * MiB
    resource.prlimit(web.pid, resource.RLIMIT_AS, (cap, hard))
    try:
        account = token(live, *seeded(live))
        Path(f"/proc/{web.pid}/clear_refs").write_text("5")  # its peak from now on
        yield {"web": web, "rss": web.memory_info().rss, "token": account}
    finally:
        if web.is_running():
            resource.prlimit(web.pid, resource.RLIMIT_AS, (soft, hard))


def seeded(live: LiveEdt) -> tuple[int, int]:
    """:data:`USER` with a READY dataset and a VALID model; their ids."""
    code = f"""
from django.contrib.auth.models import User
from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
user = User.objects.create_user("{USER}", password="{USER}-pass-1")
data = Dataset.objects.create(owner=user, name="bounded", status="READY", format="cifar10",
    summary={{"splits": {{"train": {{"count": 256}}, "test": {{"count": 64}}}}}})
model = ModelDefinition.objects.create(owner=user, name="bounded", entry="mlp.py",
    style="native", status="VALID")
print(data.pk, model.pk)
"""
    env = subprocess_env(live.data_dir)
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=PROJECT_DIR,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    dataset, model = done.stdout.split()[-2:]
    return int(dataset), int(model)


def token(live: LiveEdt, dataset: int, model: int) -> dict[str, Any]:
    status, body, _ = call(live, "POST", "/api/v1/auth/token/",
                           {"username": USER, "password": f"{USER}-pass-1"})  # fmt: skip
    assert status == 200, body
    return {"key": body["token"], "dataset": dataset, "model": model}


def call(live: LiveEdt, method: str, path: str, body: Any = None, key: str = "",
         content_type: str = "application/json") -> tuple[int, Any, float]:  # fmt: skip
    """(status, JSON answer, seconds) of one request over HTTP, as a script sends it."""
    data = body if isinstance(body, bytes) else None
    if data is None and body is not None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
    headers = {"Content-Type": content_type}
    if key:
        headers["Authorization"] = f"Token {key}"
    request = urllib.request.Request(live.url + path, data=data, method=method, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    took = time.monotonic() - started
    return status, json.loads(raw) if raw.startswith((b"{", b"[", b'"')) else raw, took


def sweep(account: dict[str, Any], **changes: Any) -> dict[str, Any]:
    space = {"lr": {"type": "loguniform", "low": 1e-3, "high": 0.3}}
    return {"model": account["model"], "dataset": account["dataset"], "objective": "loss",
            "space": space, **changes}  # fmt: skip


def hypersearch(hyper: dict[str, Any]) -> tuple[bytes, str]:
    """A multipart hypersearch whose one hyperparameter is ``hyper`` (refused before its
    model is looked at)."""
    data = json.dumps({"modelSpec": {"args": "--exec-start edtPyTorch --model-main main.py "
                                             "--cs-datastore-meta type=fs,data_path=bounded"},
                       "algoDef": {"algorithm": "Random", "objectiveMetric": "loss",
                                   "objective": "minimize"},
                       "hyperParams": [hyper]})  # fmt: skip
    boundary = "edt-bounded-work"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="data"\r\n\r\n{data}\r\n',
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="main.py"\r\n'
        f"Content-Type: text/x-python\r\n\r\nprint('hi')\r\n--{boundary}--\r\n",
    ]
    return "".join(parts).encode(), f"multipart/form-data; boundary={boundary}"


def oversized(account: dict[str, Any]) -> list[tuple[str, str, str, Any, str, int]]:
    """(what, method, path, body, content type, status) of each request past a limit."""
    grid = {"x": {"type": "int", "low": 0, "high": 10**9}}
    choices = {"x": {"type": "choice", "choices": list(range(10**6))}}
    params = {f"p{i}": {"type": "uniform", "low": 0, "high": 1} for i in range(10_000)}
    wide = {"x": {"type": "uniform", "low": -1e308, "high": 1e308}}
    power = {"name": "x", "type": "Range", "dataType": "INT", "minIntVal": 0,
             "maxIntVal": 10**9, "power": "2"}  # fmt: skip
    many = {**power, "maxIntVal": 10**8, "power": "1.0000001"}
    big = json.dumps({"username": USER, "password": "x" * 20 * MiB})
    js = "application/json"
    return [
        ("grid 0..10^9", "POST", "/api/v1/sweeps/", sweep(account, space=grid, algorithm="grid"),
         js, 400),
        ("10^6 choices", "POST", "/api/v1/sweeps/", sweep(account, space=choices), js, 413),
        ("10k parameters", "POST", "/api/v1/sweeps/", sweep(account, space=params), js, 400),
        ("±1e308 uniform", "POST", "/api/v1/sweeps/", sweep(account, space=wide), js, 400),
        ("2^70 seed", "POST", "/api/v1/sweeps/", sweep(account, seed=2**70), js, 400),
        ("2^70 min_resource", "POST", "/api/v1/sweeps/", sweep(account, min_resource=2**70),
         js, 400),
        ("WMLA Range 2^(10^9)", "POST", WMLA, *hypersearch(power), 400),
        ("WMLA Range 10^8 powers", "POST", WMLA, *hypersearch(many), 400),
        ("20 MiB body, token endpoint", "POST", "/api/v1/auth/token/", big, js, 413),
        ("20 MiB body, sweeps", "POST", "/api/v1/sweeps/", big, js, 413),
        ("50,000-deep JSON, token endpoint", "POST", "/api/v1/auth/token/", DEEP, js, 400),
        ("50,000-deep JSON, sweeps", "POST", "/api/v1/sweeps/", DEEP, js, 400),
        ("50,000-deep JSON, jobs", "POST", "/api/v1/jobs/", DEEP, js, 400),
    ]  # fmt: skip


@pytest.mark.timeout(300)
def test_oversized_requests_are_4xx_at_once_and_the_web_stays_small(
    live: LiveEdt, capped: dict[str, Any]
) -> None:
    web, account = capped["web"], capped["token"]
    seen = []
    for what, method, path, body, kind, expected in oversized(account):
        status, answer, took = call(live, method, path, body, account["key"], kind)
        seen.append(f"{what}: {status} in {took:.2f} s")
        assert status == expected, f"{what}: {status} {str(answer)[:300]}"
        assert took < bound(1.0), f"{what}: answered in {took:.2f} s"
        assert isinstance(answer, dict) and answer["error"], f"{what}: {answer!r}"
    grown = peak_rss(web) - capped["rss"]
    assert grown < 300 * MiB, f"the web grew by {grown / MiB:.0f} MiB: {seen}"
    assert web_process(live).pid == web.pid and web.is_running(), "the web was restarted"
    wait_for(lambda: call(live, "GET", "/healthz")[0] == 200, 10, "the web answering")
    print(f"web {web.pid}: rss at start {capped['rss'] / MiB:.0f} MiB, peak "
          f"{peak_rss(web) / MiB:.0f} MiB; {'; '.join(seen)}")  # fmt: skip
