"""A dataset larger than a learner's memory, registered in place under a data root, trains
to COMPLETED on a live EDT of its own (docs/architecture.md, "Datasets in place" and
"Input pipeline"): read where it lies, decoded by DataLoader workers, never whole."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from edtweb.redis_server import RedisServer
from tests.harness.processes import PROJECT_DIR, subprocess_env
from tests.harness.stack import edt_of_its_own
from tests.harness.waiting import wait_for
from workers import sandbox
from workers.learner.imagefolder import write_photos

LIMIT_MIB = 1536  # EDT_LEARNER_MEMORY: each learner's (and loader worker's) address space
SIDE = 2048  # pixels: 12 MiB an image decoded
TRAIN, TEST = 400, 40
USER = "gina"


def test_an_image_folder_three_times_a_learners_memory_trains_in_place(tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    images = write_photos(roots / "photos", TRAIN, TEST, SIDE)
    decoded = (TRAIN + TEST) * SIDE * SIDE * 3
    assert decoded >= 3 * LIMIT_MIB << 20
    on_disk = sum(p.stat().st_size for p in images.rglob("*") if p.is_file())
    redis = RedisServer(tmp_path / "redis", appendonly=False, password=secrets.token_hex(16),
                        dies_with_parent=True).start()  # fmt: skip
    env = subprocess_env(tmp_path / "data", REDIS_URL=redis.url)
    env.pop("DATABASE_URL", None)
    env.update(EDT_LEARNER_MEMORY=f"{LIMIT_MIB}m", EDT_DATA_ROOTS=str(roots),
               EDT_LEARNER_PROCESSES="256")  # fmt: skip
    if os.geteuid() == 0:  # a learners' user of this test's own (tests/harness/stack.py)
        env["EDT_LEARNER_USER"] = f"edt-learner-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
        sandbox.account(env["EDT_LEARNER_USER"])
    with edt_of_its_own(tmp_path, env, slots=1, redis=redis) as live:
        live.login(USER)
        added = live.json(USER, "datasets", "add", "--path", str(images), "--name", "photos",
                          timeout=120)  # fmt: skip
        assert added["status"] == "READY" and added["source"] == str(images), added
        assert added["summary"]["splits"]["train"]["count"] == TRAIN
        live.json(USER, "models", "upload", str(PROJECT_DIR / "examples" / "mlp.py"),
                  "--name", "mlp", timeout=120)  # fmt: skip
        job = live.json(USER, "submit", "--model", "mlp", "--dataset", "photos",
                        "--epochs", "2", "--batch-size", "40", "--image-size", "32",
                        "--loader-workers", "2")  # fmt: skip
        state = lambda: live.json(USER, "jobs", "show", str(job["id"]))["state"]  # noqa: E731
        wait_for(lambda: state() in ("COMPLETED", "FAILED"), 300, "the job's end")
        shown = live.json(USER, "jobs", "show", str(job["id"]))
        assert shown["state"] == "COMPLETED", shown["error"]
        logs = "\n".join(p.read_text() for p in (live.data_dir / "jobs").rglob("logs/*.log"))
        # nothing copied: no image in the data directory, its dataset folder a few thumbnails
        copies = list(live.data_dir.rglob("*.jpg"))
        kept = live.data_dir / "datasets" / str(added["id"])
        stored = sum(p.stat().st_size for p in kept.rglob("*") if p.is_file())
    peaks = [int(m) for m in re.findall(r"peak memory: resident (\d+) MiB", logs)]
    assert peaks and max(peaks) < LIMIT_MIB, logs[-3000:]
    assert copies == [] and stored < on_disk / 1000, (copies, stored, on_disk)
