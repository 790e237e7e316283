from __future__ import annotations

from pathlib import Path

from scheduler.store import JobStore
from workers.learner.host import STALE, learner_env, run_learner


def test_a_learner_gets_no_platform_secrets() -> None:
    base = {
        "PATH": "/usr/bin", "SECRET_KEY": "s3cret", "DATABASE_URL": "postgres://u:pw@db/edt",
        "AWS_SECRET_ACCESS_KEY": "x", "CUDA_VISIBLE_DEVICES": "GPU-1", "NCCL_DEBUG": "INFO",
    }  # fmt: skip
    env = learner_env("redis://127.0.0.1:6379/0", base)
    assert "SECRET_KEY" not in env and "DATABASE_URL" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-1" and env["NCCL_DEBUG"] == "INFO"
    assert env["EDT_TORCH_THREADS"] == "1"


def test_a_task_with_a_stale_token_starts_nothing(store: object, tmp_path: Path) -> None:
    from scheduler.store import Store

    assert isinstance(store, Store)
    jobs = JobStore(store.r, "stale-job")
    jobs.set_dispatch("h.0", "current")
    spec = tmp_path / "spec.json"  # never read: nothing starts
    assert run_learner(jobs, "h.0", "old", spec, "redis://unused") == STALE
    assert not (tmp_path / "logs").exists()
