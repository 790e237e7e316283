"""Hostile model code, through the API as a non-staff user, at check time and in a training
job, against the run's live EDT (tests/harness/stack.py).

Each hostile model tries several attacks and raises with what it got (``OUTCOME: ...``):
at check time the check fails with that message; in training (the check passes: attacks run
only when the learner's ``REDIS_URL`` is set) the job fails with it. The test reads the
message: every attack refused or contained, nothing secret in it, no process of the model
left, and Dave's job next to it trains on throughout.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import LiveEdt, dataset_archive
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.timeout(600)  # the first case also starts the stack's jobs
ATTACKER, VICTIM = "mallory", "dave"
ENDED = ("COMPLETED", "FAILED", "STOPPED")
SETSID_MARK, FORK_MARK = "876.543", "987.654"  # the sleeps the model leaves behind

PROLOGUE = """
import os, subprocess, sys, time
DATA, PROJECT, OTHER_JOB, OTHER_DATASET = {data!r}, {project!r}, {job!r}, {dataset!r}
REDIS_DIR, REDIS_PORT = {redis_dir!r}, {redis_port!r}
SETSID_MARK, FORK_MARK = {setsid!r}, {fork!r}
TRAINING = bool(os.environ.get("REDIS_URL"))
PHASE = "training" if TRAINING else "check"
ACTIVE = {always} or TRAINING  # the training variant must pass its check
results = []

def attempt(name, action):
    try:
        got = action()
        results.append(f"{{name}}: GOT {{str(got)[:80]!r}}")
    except BaseException as exc:
        results.append(f"{{name}}: refused {{type(exc).__name__}}")

def read(path):
    with open(path, "rb") as f:
        return f.read(64)

def cmdline(pid):
    try:
        return read(f"/proc/{{pid}}/cmdline")
    except OSError:
        return b""
"""

READS = """
for name in ("secret_key", "admin-password", "edt.sqlite3"):
    attempt("read " + name, lambda: read(os.path.join(DATA, name)))
attempt("read redis conf", lambda: read(os.path.join(REDIS_DIR, "redis.conf")))
attempt("read shadow", lambda: read("/etc/shadow"))
attempt("read other job", lambda: read(f"{DATA}/jobs/{OTHER_JOB}/spec.json"))
attempt("list other dataset", lambda: os.listdir(f"{DATA}/datasets/{OTHER_DATASET}"))
PLATFORM = (b"daphne", b"edt_scheduler", b"edt_metrics", b"celery", b"edt_run")
platform = [p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())
            and any(w in cmdline(p) for w in PLATFORM)]
results.append(f"platform processes seen: {len(platform) > 0}")
for pid in platform:
    attempt("environ of " + pid, lambda: read(f"/proc/{pid}/environ"))
"""

WRITES = """
for target in (f"{DATA}/pwned", f"{DATA}/jobs/{OTHER_JOB}/pwned", f"{PROJECT}/pwned",
               f"{DATA}/datasets/{OTHER_DATASET}/pwned"):
    attempt("write " + target, lambda: open(target, "w").write("x"))
if TRAINING:
    own = os.path.join(os.environ["HOME"], "mine.txt")
    attempt("write own job dir", lambda: open(own, "w").write("mine") and "ok")
"""

PROCESSES = """
def daemon():
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", SETSID_MARK])
        os._exit(0)
    os.waitpid(pid, 0)
    return "daemonised"
setsid = lambda: subprocess.Popen(["sleep", SETSID_MARK], start_new_session=True).pid
attempt("setsid child", setsid)
attempt("double fork", daemon)
children = []
def fork_loop():
    for _ in range(100_000):
        children.append(subprocess.Popen(["sleep", FORK_MARK]))
    return len(children)
attempt("fork loop", fork_loop)
results.append(f"forked {len(children)} before the limit")
"""

MEMORY = """
hog = bytearray(4 << 30)  # 4 GiB
"""

REDIS = """
import redis
if TRAINING:
    mine = redis.Redis.from_url(os.environ["REDIS_URL"])
    other = f"edt:job:{OTHER_JOB}:"
    attempt("redis read other job", lambda: mine.get(other + "gen"))
    attempt("redis list other job", lambda: mine.lrange(other + "errors", 0, -1))
    attempt("redis write other job", lambda: mine.set(other + "stop", 1))
    attempt("redis CONFIG GET", lambda: mine.config_get("dir"))
    attempt("redis KEYS", lambda: mine.keys("*"))
    attempt("redis FLUSHALL", lambda: mine.flushall())
bare = redis.Redis(port=REDIS_PORT, socket_timeout=5, socket_connect_timeout=5)
attempt("redis without password", lambda: bare.config_get("dir"))
"""

EPILOGUE = """
from torch import nn

def build_model():
    if ACTIVE:
        raise RuntimeError("OUTCOME " + PHASE + ": " + " | ".join(results))
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
"""


class Api:
    def __init__(self, live: LiveEdt, user: str) -> None:
        self.base = f"{live.url}/api/v1/"
        auth = requests.post(
            self.base + "auth/token/", json={"username": user, "password": f"{user}-pass-1"}
        )
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {auth.json()['token']}"

    def get(self, path: str) -> Any:
        reply = self.session.get(self.base + path, timeout=60)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def post(self, path: str, **kwargs: Any) -> Any:
        reply = self.session.post(self.base + path, timeout=120, **kwargs)
        assert reply.status_code in (200, 201), reply.text
        return reply.json()

    def dataset(self, folder: Path, name: str) -> int:
        with dataset_archive(folder, train=128, test=32).open("rb") as f:
            pk = int(self.post("datasets/", data={"name": name}, files={"file": f})["id"])
        ready = lambda: self.get(f"datasets/{pk}/")["status"] == "READY"  # noqa: E731
        wait_for(ready, 180, "the dataset", step=0.5)
        return pk

    def model(self, name: str, source: str) -> int:
        files = {"file": (f"{name}.py", source.encode())}
        return int(self.post("models/", data={"name": name}, files=files)["id"])

    def checked(self, pk: int) -> Any:
        return wait_for(
            lambda: (m := self.get(f"models/{pk}/"))["status"] != "CHECKING" and m,
            180,
            f"the check of model {pk}",
            step=0.5,
        )

    def job(self, pk: int) -> Any:
        return self.get(f"jobs/{pk}/")


@pytest.fixture(scope="module")
def stack(live: LiveEdt, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Dave's job training on one slot all along; Mallory's dataset for her jobs."""
    folder = tmp_path_factory.mktemp("sandbox")
    folder.chmod(0o755)
    dave = Api(live, VICTIM)
    dave_data = dave.dataset(folder / "dave", "dave-data")
    # The paced MLP: a step sleeps 50 ms. An unpaced MLP's one-sample step takes about a
    # millisecond: it kept a core and the metrics consumer busy all along the module.
    mlp = dave.model("dave-mlp", (PROJECT_DIR / "tests" / "models" / "paced_mlp.py").read_text())
    assert dave.checked(mlp)["status"] == "VALID"
    # The longest job the API takes: 10,000 epochs of one-sample steps, days at this pace.
    body = {"name": "dave's long job", "model": mlp, "dataset": dave_data, "epochs": 10_000,
            "max_workers": 1, "batch_size": 1}  # fmt: skip
    victim = int(dave.post("jobs/", json=body)["id"])
    wait_for(lambda: dave.job(victim)["steps_done"] > 0, 180, "dave's job to train", step=0.5)
    mallory = Api(live, ATTACKER)
    fields = {"data": str(live.data_dir), "project": str(PROJECT_DIR), "job": victim,
              "dataset": dave_data, "redis_dir": str(live.redis.directory),
              "redis_port": live.redis.port}  # fmt: skip
    yield {"dave": dave, "victim": victim, "mallory": mallory, "fields": fields,
           "data": mallory.dataset(folder / "mallory", "mallory-data")}  # fmt: skip
    dave.post(f"jobs/{victim}/stop/")  # the live EDT goes on serving other modules


def hostile(stack: dict[str, Any], attack: str, phase: str) -> str:
    """The attack runs at import: always in the check variant, only in a learner in the
    training variant (which must pass its check to be trained)."""
    fields = dict(stack["fields"], always=phase == "check", setsid=SETSID_MARK, fork=FORK_MARK)
    body = textwrap.indent(attack, "    ")
    return PROLOGUE.format(**fields) + "if ACTIVE:\n    pass\n" + body + EPILOGUE


def leftovers() -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if SETSID_MARK in line or FORK_MARK in line:
            found.append(f"{proc.pid} {line}")
    return found


CASES = {
    "reads": (READS, ["read secret_key: refused", "read admin-password: refused",
                      "read edt.sqlite3: refused", "read shadow: refused",
                      "read redis conf: refused",
                      "read other job: refused",
                      "list other dataset: refused", "platform processes seen: True"]),
    "writes": (WRITES, ["pwned: refused"]),
    "processes": (PROCESSES, ["setsid child: GOT", "double fork: GOT", "fork loop: refused"]),
    "memory": (MEMORY, ["out of memory in your code"]),
    "redis": (REDIS, ["redis without password: refused AuthenticationError"]),
}  # fmt: skip
TRAINING_ONLY = {
    "redis": ["redis read other job: refused NoPermissionError",
              "redis list other job: refused NoPermissionError",
              "redis write other job: refused NoPermissionError",
              "redis CONFIG GET: refused NoPermissionError",
              "redis KEYS: refused NoPermissionError",
              "redis FLUSHALL: refused NoPermissionError"],
    "writes": ["write own job dir: GOT"],
}  # fmt: skip
ALLOWED_GOT = ("setsid child: GOT", "double fork: GOT", "write own job dir: GOT")


def assert_contained(message: str, case: str, phase: str) -> None:
    expected = CASES[case][1] + (TRAINING_ONLY.get(case, []) if phase == "training" else [])
    for part in expected:
        assert part in message, f"{case} at {phase}: {part!r} not in {message!r}"
    outcome = message.partition("OUTCOME ")[2].partition(": ")[2]
    got = [p for p in outcome.split(" | ") if "GOT" in p and not p.startswith(ALLOWED_GOT)]
    assert got == [], f"{case} at {phase} reached: {got}"
    wait_for(lambda: not leftovers(), 30, f"no process of the {case} model left", step=0.5)


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_code_is_contained_at_check_time(stack: dict[str, Any], case: str) -> None:
    mallory: Api = stack["mallory"]
    pk = mallory.model(f"hostile-{case}-check", hostile(stack, CASES[case][0], "check"))
    model = mallory.checked(pk)
    assert model["status"] == "INVALID", model
    message = model["error"]
    if case != "memory":
        assert "OUTCOME check" in message, message
    assert_contained(message, case, "check")


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_code_is_contained_in_training(stack: dict[str, Any], case: str) -> None:
    mallory: Api = stack["mallory"]
    pk = mallory.model(f"hostile-{case}-train", hostile(stack, CASES[case][0], "training"))
    assert mallory.checked(pk)["status"] == "VALID"
    body = {"name": f"hostile {case}", "model": pk, "dataset": stack["data"], "epochs": 1,
            "max_workers": 1, "batch_size": 32}  # fmt: skip
    job = int(mallory.post("jobs/", json=body)["id"])
    ended = wait_for(
        lambda: (j := mallory.job(job))["state"] in ENDED and j, 180, f"hostile job {case}", 0.5
    )
    assert ended["state"] == "FAILED", ended
    message = ended["error"]
    if case != "memory":
        assert "OUTCOME training" in message, message
    assert_contained(message, case, "training")
    dave_job = stack["dave"].job(stack["victim"])
    assert dave_job["state"] == "RUNNING", dave_job
    steps = dave_job["steps_done"]
    wait_for(lambda: stack["dave"].job(stack["victim"])["steps_done"] > steps, 60,
             "dave's job to go on training", step=0.5)  # fmt: skip


def test_nothing_was_written_outside_the_job_directories(
    stack: dict[str, Any], live: LiveEdt
) -> None:
    victim = stack["victim"]
    dataset = live.data_dir / "datasets" / str(stack["fields"]["dataset"])
    jobs = live.data_dir / "jobs"
    for path in (live.data_dir, jobs / str(victim), PROJECT_DIR, dataset):
        assert not (path / "pwned").exists(), path
    assert stack["dave"].job(victim)["state"] == "RUNNING"
