"""No host read inside a step (docs/architecture.md, "Elastic training protocol"): the
host reads a step's agreement only after the next step is queued, so on a GPU the host
runs a step ahead of the device. Real learner processes under the driver, real gloo; a
TorchFunctionMode in each learner (tests/models/counts_host_reads.py) sees every read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edtweb.redis_server import RedisServer
from tests.harness.processes import PROJECT_DIR
from tests.test_elastic import dataset, drive  # noqa: F401  (the module's dataset fixture)

COUNTING = PROJECT_DIR / "tests" / "models" / "counts_host_reads.py"


@pytest.mark.parametrize("workers", [1, 2])
def test_no_step_reads_its_own_values_before_the_next_step_is_queued(
    redis_server: RedisServer, tmp_path: Path, dataset: Path, workers: int,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    reads_dir = tmp_path / "reads"
    reads_dir.mkdir()
    monkeypatch.setenv("EDT_TEST_READS_DIR", str(reads_dir))
    drive(redis_server, tmp_path, dataset, f"0:{workers}", "--max-steps", "12",
          model=COUNTING)  # fmt: skip
    seen = [json.loads(p.read_text()) for p in sorted(reads_dir.glob("reads-*.json"))]
    assert len(seen) == workers, "a learner wrote no count of its reads"
    for learner in seen:
        # the agreement is read, one step late: something is read, and none of it early
        assert learner["reads"], "no read at all: the counting saw nothing"
        assert learner["early"] == [], (
            f"step values read before the next step was queued: {learner['early'][:5]}"
        )
