"""The trace simulator on small synthetic traces: exact timelines, conservation, baselines."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.simulate import (
    Config,
    SimJob,
    TraceJob,
    jobs_from_trace,
    offered_load,
    read_trace,
    run,
    sample_load,
    simulate,
    window,
)
from scheduler.simulate.__main__ import main
from scheduler.simulate.cluster import ClusterConfig, best_size, simulate_workload, speedups
from scheduler.simulate.metrics import jain, percentile
from scheduler.simulate.pollux import (
    Application,
    load_applications,
    normalise,
    read_workload,
)
from scheduler.simulate.speedup import fit_app, speedup, usable
from tests.harness.processes import PROJECT_DIR

POLICIES = ["fairshare", "priority", "fifo-gang", "tiresias"]


def finished(jobs: list[SimJob], config: Config) -> dict[str, tuple[float, int]]:
    """Job id -> (completion time, reallocations)."""
    return {r.job.id: (r.finished, r.reallocations) for r in simulate(jobs, config)}


@pytest.mark.parametrize("pause", [1.0, 30.0])
def test_a_resize_costs_the_configured_pause_and_nothing_else(pause: float) -> None:
    # A alone on 2 slots; B arrives at 10 -> 1/1 (A pauses); B done at 60 -> A back to 2.
    jobs = [SimJob("A", 0, 2, work=200), SimJob("B", 10, 1, work=50)]
    result = finished(jobs, Config(2, resize_pause=pause))
    a_done = 60 + pause + (200 - 20 - (50 - pause)) / 2
    assert result == {"B": (60.0, 0), "A": (pytest.approx(a_done), 2)}


def test_fifo_gang_never_resizes_and_makes_later_jobs_wait() -> None:
    jobs = [SimJob("A", 0, 2, work=200), SimJob("B", 10, 1, work=50)]
    assert finished(jobs, Config(2, "fifo-gang")) == {"A": (100.0, 0), "B": (150.0, 0)}


def test_tiresias_preempts_a_job_the_moment_it_passes_the_threshold() -> None:
    # A reaches 100 slot-seconds at t=50 and drops to queue 2; B (queue 1) takes over at
    # once; A restarts from its checkpoint (30 s) when B completes.
    jobs = [SimJob("A", 0, 2, work=400), SimJob("B", 1, 2, work=100)]
    result = finished(jobs, Config(2, "tiresias", restart_pause=30.0, threshold=100.0))
    assert result == {"B": (100.0, 0), "A": (100 + 30 + 300 / 2, 2)}


def test_a_slower_speedup_makes_a_shrunk_job_take_longer() -> None:
    half = 1 / speedup(0.5, 2)  # seconds per unit of work on 2 slots with s = 0.5
    jobs = [SimJob("A", 0, 2, work=100 * speedup(0.5, 2), serial=0.5)]
    [result] = simulate(jobs, Config(2))
    assert result.finished == pytest.approx(100 * speedup(0.5, 2) * half)
    assert result.job.isolated == pytest.approx(100)


def synthetic(count: int, seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    return [
        SimJob(f"j{i}", rng.uniform(0, 2000), rng.choice([1, 1, 1, 2, 4, 8]), rng.uniform(10, 3000))
        for i in range(count)
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_job_completes_and_work_is_conserved(policy: str) -> None:
    """With linear speedup and free resizes, the slot-seconds held equal the work done."""
    jobs = synthetic(60, seed=7)
    results = simulate(jobs, Config(8, policy, resize_pause=0, restart_pause=0))
    assert sorted(r.job.id for r in results) == sorted(j.id for j in jobs)
    assert sum(r.attained for r in results) == pytest.approx(sum(j.work for j in jobs))
    assert all(r.jct >= r.job.isolated - 1e-6 for r in results)


def test_fairshare_beats_fifo_gang_on_average_jct_when_small_jobs_follow_a_big_one() -> None:
    big = SimJob("big", 0, 8, work=8 * 10_000)
    small = [SimJob(f"s{i}", 10 + i, 1, work=100) for i in range(8)]
    fair = run([big, *small], Config(8, "fairshare")).summary
    fifo = run([big, *small], Config(8, "fifo-gang")).summary
    assert fair.avg_jct < 0.5 * fifo.avg_jct
    assert fair.jain > fifo.jain


def test_the_simulator_is_event_driven_not_ticking() -> None:
    jobs = synthetic(100, seed=3)
    result = run(jobs, Config(16))
    assert result.decisions <= 2 * len(jobs)
    assert result.summary.makespan > 1000  # many simulated seconds, few decisions


def test_summary_metrics() -> None:
    assert percentile(list(range(1, 101)), 0.99) == 99
    assert percentile([5.0], 0.5) == 5.0
    assert jain([2.0, 2.0, 2.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5


TRACE = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-02 00:00:10,100.0,2,200.0,x
2017-10-01 00:00:00,50.0,1,50.0,x
2017-10-03 12:00:00,10.0,128,1280.0,x
2017-10-03 13:00:00,20.0,1,20.0,x
"""


def write_trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def test_a_trace_is_read_sorted_and_windowed_by_day(tmp_path: Path) -> None:
    jobs = read_trace(write_trace(tmp_path))
    assert [(j.row, j.submitted) for j in jobs] == [(1, 0), (0, 86410), (2, 216000), (3, 219600)]
    assert [(j.row, j.submitted) for j in window(jobs, start_day=1, days=1)] == [(0, 10)]
    assert [j.row for j in window(jobs, start_day=1, limit=2)] == [0, 2]


def test_trace_jobs_ask_their_gpus_at_most_the_cluster_and_keep_their_work(
    tmp_path: Path,
) -> None:
    trace = read_trace(write_trace(tmp_path))
    jobs = {j.id: j for j in jobs_from_trace(trace, 64, [0.1])}
    assert (jobs["0"].max_workers, jobs["2"].max_workers) == (2, 64)
    assert jobs["0"].work == pytest.approx(100 * speedup(0.1, 2))
    assert jobs["0"].isolated == pytest.approx(100)


WEEK = 7 * 86400.0


def heavy_tailed_week(count: int = 3000, seed: int = 11) -> list[TraceJob]:
    """Philly-like: mostly one GPU, log-uniform durations from a minute to four days."""
    rng = random.Random(seed)
    jobs = [
        TraceJob(
            row,
            rng.uniform(0, WEEK),
            60 * 6000 ** rng.random(),
            rng.choice([1] * 14 + [2, 4, 8, 16]),
        )
        for row in range(count)
    ]
    return sorted(jobs, key=lambda job: (job.submitted, job.row))


@pytest.mark.parametrize(("slots", "load"), [(16, 1.0), (64, 1.0), (16, 0.5), (16, 2.0)])
def test_a_load_matched_sample_reaches_the_target_load(slots: int, load: float) -> None:
    week = heavy_tailed_week()
    assert offered_load(week, slots, WEEK) > 2 * load  # the raw week is an overload
    for seed in range(3):
        sample = sample_load(week, slots, WEEK, load, seed)
        assert offered_load(sample, slots, WEEK) == pytest.approx(load, rel=0.02)
        assert offered_load(sample, slots, WEEK) <= load


def test_a_load_matched_sample_is_a_seeded_subset_in_submission_order() -> None:
    week = heavy_tailed_week()
    sample = sample_load(week, 16, WEEK, seed=5)
    assert sample == sample_load(week, 16, WEEK, seed=5)  # deterministic
    assert sample != sample_load(week, 16, WEEK, seed=6)
    rows = {job.row for job in sample}
    assert sample == [job for job in week if job.row in rows]  # same jobs, times, order
    assert len(rows) == len(sample) < len(week)


def test_a_window_lighter_than_the_target_is_taken_whole() -> None:
    week = heavy_tailed_week(count=200)
    slots = 1024
    assert offered_load(week, slots, WEEK) < 1.0
    assert sample_load(week, slots, WEEK, 1.0, seed=0) == week
    with pytest.raises(ValueError):
        sample_load(week, 0, WEEK)


def scalability_csv(path: Path, sync: float) -> Path:
    """Step time b*m (perfectly parallel compute) plus an all-reduce of ``sync`` seconds."""
    rows = ["num_nodes,num_replicas,local_bsz,step_time,sync_time"]
    for n in (2, 4, 8, 16):
        for m in (16, 32, 64):
            rows.append(f"{n},{n},{m},{0.01 * m + sync},{sync}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_amdahl_fit_separates_apps_that_scale_from_apps_that_do_not(tmp_path: Path) -> None:
    scales = fit_app(scalability_csv(tmp_path / "scales.csv", sync=0.0))
    stalls = fit_app(scalability_csv(tmp_path / "stalls.csv", sync=5.0))
    assert scales.serial == pytest.approx(0.0, abs=1e-9)
    assert stalls.serial > 0.5
    assert usable([scales, stalls]) == [scales]


def test_the_command_line_prints_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--trace", str(write_trace(tmp_path)), "--gpus", "4", "--serial-fraction", "0.1"]
    assert main([*args, "--policy", "tiresias", "--days", "2"]) == 0
    out = capsys.readouterr().out
    for line in ["2 jobs", "average JCT", "median JCT", "p99 JCT", "makespan", "utilisation"]:
        assert line in out
    assert "Jain's fairness" in out and "reallocations/job" in out


def test_the_command_line_samples_a_load_matched_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--trace", str(write_trace(tmp_path)), "--gpus", "1", "--serial-fraction", "0"]
    # Four days of 1 slot: 345,600 slot-seconds, 0.0012 of which (415) holds some of the
    # jobs (50, 200, 1,280 and 20 slot-seconds), not all.
    assert main([*args, "--days", "4", "--load", "0.0012", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "load-matched sample (seed 1)" in out and "of the window's 4 jobs" in out
    assert "4 jobs from day 0" not in out
    with pytest.raises(SystemExit):
        main([*args, "--load", "1.0"])  # no --days: no window to spread the load over


def test_it_runs_as_a_module(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "scheduler.simulate", "--trace", str(write_trace(tmp_path))]
    out = subprocess.run(
        [*command, "--serial-fraction", "0", "--limit", "2"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "2 jobs" in out.stdout and "policy fairshare" in out.stdout


# The Pollux artifact's workloads and applications --------------------------------------------

POLLUX = PROJECT_DIR / "tests" / "data" / "pollux-osdi21"


@pytest.fixture(scope="module")
def apps() -> dict[str, Application]:
    return load_applications(POLLUX / "traces")


def test_a_workload_is_read_in_submission_order_with_its_batches(
    apps: dict[str, Application],
) -> None:
    jobs = read_workload(POLLUX / "workloads-0.5" / "workload-1.csv", apps)
    assert len(jobs) == 80
    assert [j.submitted for j in jobs] == sorted(j.submitted for j in jobs)
    assert {j.app for j in jobs} == set(apps)
    cifar = next(j for j in jobs if j.app == "cifar10")
    assert cifar.batch in (2048, 4096) and cifar.replicas in (6, 8, 12, 16)


BAD_ROWS = {
    "an unknown application": ("a,1,resnet9000,1,128", "unknown application 'resnet9000'"),
    "a batch outside the validated range": ("a,1,cifar10,1,64", "batch 64 outside cifar10"),
    "a non-number": ("a,soon,cifar10,1,128", "not a workload row"),
    "no replicas": ("a,1,cifar10,0,128", "must be positive"),
}


@pytest.mark.parametrize("row, message", BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_a_bad_workload_row_is_refused_with_its_line(
    tmp_path: Path, apps: dict[str, Application], row: str, message: str
) -> None:
    path = tmp_path / "workload-1.csv"
    path.write_text(f"name,time,application,num_replicas,batch_size\nok,0,ncf,1,32768\n{row}\n")
    with pytest.raises(ValueError, match=f"workload-1.csv:3: .*{message}"):
        read_workload(path, apps)


def placement_rows(app: str, placement: str) -> dict[float, tuple[float, float]]:
    text = (POLLUX / "traces" / app / "placements.csv").read_text().splitlines()[1:]
    rows = [line.split(",") for line in text if line.split(",")[0] == placement]
    return {float(r[1]): (float(r[2]), float(r[3])) for r in rows}


def test_a_measured_placement_is_interpolated_in_the_local_batch(
    apps: dict[str, Application],
) -> None:
    rows = placement_rows("cifar10", "44")
    cifar = apps["cifar10"]
    assert cifar.throughput((4, 4), 64) == pytest.approx(rows[64])
    midway = [(a + b) / 2 for a, b in zip(rows[45], rows[64], strict=True)]
    # 54.5 is halfway between the measured 45 and 64
    assert cifar.throughput((4, 4), 54.5) == pytest.approx(midway)  # type: ignore[arg-type]
    # A placement is named by its smallest rotation, as the artifact names it.
    assert normalise((4, 1, 3)) == (1, 3, 4) and normalise((3, 0, 1)) == (1, 3)


def test_a_placement_over_more_nodes_lies_between_the_measured_node_counts(
    apps: dict[str, Application],
) -> None:
    cifar = apps["cifar10"]
    at = {nodes: cifar.grid[(nodes, 2 * nodes)].at(64)[0] for nodes in (8, 12)}
    step, _ = cifar.throughput((2,) * 10, 64)  # 10 nodes x 2: between 8 x 2 and 12 x 2
    assert step == pytest.approx((at[8] + at[12]) / 2)


def test_a_fixed_batch_is_split_as_the_artifact_splits_it(apps: dict[str, Application]) -> None:
    assert apps["cifar10"].split(2048, 6) == (342, 0)
    assert apps["yolov3"].split(64, 4) == (8, 1)  # at most 8 per micro-batch: accumulate
    assert apps["ncf"].split(32768, 1) == (16384, 1)  # one replica above the smallest batch
    # More replicas at the same batch: faster, up to the application's best size.
    curve = speedups(apps["cifar10"], 2048, 64)
    assert curve[0] == 1.0 and curve[3] > 3 and best_size(apps["cifar10"], 2048, 64) > 4


def test_our_tiresias_reproduces_the_artifacts_on_a_workload(
    apps: dict[str, Application],
) -> None:
    """Gangs of the workload's replicas at its batch sizes, 30 s per restart, 60 s decisions:
    the average JCT within 10 % of the artifact's own Tiresias run of the same workload."""
    workload = read_workload(POLLUX / "workloads-0.5" / "workload-1.csv", apps)
    outcomes = simulate_workload(workload, apps, ClusterConfig("tiresias"))
    assert sorted(o.name for o in outcomes) == sorted(j.name for j in workload)
    reference = json.loads((POLLUX / "tiresias-0.5-workload-1.json").read_text())
    ours = sum(o.jct for o in outcomes) / len(outcomes)
    assert ours == pytest.approx(reference["avg"], rel=0.10)
    # Not only on average: most jobs finish within a decision interval of the artifact's.
    close = [abs(o.jct - reference["jcts"][o.name]) <= 60 for o in outcomes]
    assert sum(close) >= 0.8 * len(close)


@pytest.mark.parametrize("policy", ["fairshare", "fairshare-las", "fairshare-speedup"])
def test_elastic_policies_keep_every_batch_and_pay_the_resize_pause(
    apps: dict[str, Application], policy: str
) -> None:
    workload = read_workload(POLLUX / "workloads-0.5" / "workload-1.csv", apps)[:20]
    cheap = simulate_workload(workload, apps, ClusterConfig(policy, resize_pause=0.1))
    dear = simulate_workload(workload, apps, ClusterConfig(policy, resize_pause=30.0))
    alone = {}
    for j in workload:
        alone[j.name] = apps[j.app].alone(j.batch, best_size(apps[j.app], j.batch, 64))
    assert all(o.jct >= alone[o.name] - 60 for o in cheap)  # never faster than alone (±rounding)
    assert sum(o.resizes for o in cheap) > 0
    mean = {k: sum(o.jct for o in v) / len(v) for k, v in {"cheap": cheap, "dear": dear}.items()}
    assert mean["cheap"] < mean["dear"]


def test_the_pollux_command_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "workloads-0.5"
    folder.mkdir()
    source = (POLLUX / "workloads-0.5" / "workload-1.csv").read_text().splitlines()
    (folder / "workload-1.csv").write_text("\n".join(source[:21]) + "\n")
    (folder / "workload-2.csv").write_text("\n".join(source[:1] + source[21:41]) + "\n")
    traces = str(POLLUX / "traces")
    args = ["pollux", "--workloads", str(folder), "--traces", traces, "--procs", "1"]
    assert main([*args, "--policy", "fairshare-speedup", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"policy", "load", "avg_jct_h", "p99_jct_h", "makespan_h", "workloads"}
    assert (out["policy"], out["load"], out["workloads"]) == ("fairshare-speedup", 0.5, 2)
    assert 0 < out["avg_jct_h"] <= out["p99_jct_h"] and out["makespan_h"] > out["avg_jct_h"]
    assert main([*args, "--policy", "tiresias"]) == 0
    text = capsys.readouterr().out
    assert "workload-1" in text and "alone at its best size" in text
    (folder / "workload-3.csv").write_text("name,time\nx,1\n")
    assert main([*args, "--policy", "tiresias"]) == 1
    assert "workload-3.csv:2: not a workload row" in capsys.readouterr().err


def test_least_attained_service_admission_wakes_when_a_job_changes_class() -> None:
    # One slot: A runs first (same class, earlier); at 3,600 slot-seconds it drops a class
    # and B, which has had none, takes the slot; A resumes when B is done.
    jobs = [SimJob("A", 0, 1, work=10_000), SimJob("B", 10, 1, work=100)]
    for policy in ("fairshare-las", "fairshare-speedup"):
        result = finished(jobs, Config(1, policy, restart_pause=0.0))
        assert result == {"B": (3_700.0, 0), "A": (10_100.0, 2)}
