"""The `edt` CLI against a live EDT (`manage.py edt_run`, 2 CPU slots, a Redis of its own):
log in, upload, train, follow the logs, reprioritise, download; staff's teams, groups and
users, a job trained in a team; and exit codes scripts can trust. The live server is the
run's (tests/harness/stack.py), shared with other modules."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import torch

from edtweb.redis_server import free_port
from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import MAX_UPLOAD, LiveEdt, dataset_archive, edt_command
from tests.harness.waiting import wait_for
from workers.learner.submission import DEFAULTS


def test_login_upload_train_follow_reprioritise_and_download(live: LiveEdt) -> None:
    live.login("carol")
    credentials = live.tmp / "config-carol" / "edt" / "credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert live.json("carol", "whoami")["username"] == "carol"

    upload = live.edt(
        "carol", "datasets", "upload", str(dataset_archive(live.tmp)), "--name", "shapes"
    )
    assert upload.returncode == 0, upload.stderr
    assert "READY: shapes" in upload.stdout and "upload shapes.tar.gz:" in upload.stderr
    model = live.json(
        "carol", "models", "upload", str(PROJECT_DIR / "examples" / "mlp.py"), "--name", "mlp"
    )
    assert model["status"] == "VALID" and model["style"] == "native"

    common = ("--model", "mlp", "--dataset", "shapes", "--max-workers", "2", "--batch-size", "64")
    first = live.json("carol", "submit", *common, "--epochs", "3", "--name", "first")
    # Runs until stopped (5,000 epochs: hours), whichever slots other modules' jobs hold.
    second = live.json("carol", "submit", *common, "--epochs", "5000", "--name", "second")
    # With nothing optional, the job has the defaults of every other submit path.
    plain = live.json("carol", "submit", "--model", "mlp", "--dataset", "shapes")
    assert {k: plain[k] for k in DEFAULTS} == DEFAULTS
    # Stopped to free its slot; a busy machine may have let its 5 short epochs finish first.
    stopped = live.edt("carol", "stop", str(plain["id"]))
    assert stopped.returncode == 0 or "has already ended (COMPLETED)" in stopped.stderr, stopped
    assert live.edt("carol", "delete", str(plain["id"])).returncode == 0
    moved = live.edt("carol", "priority", str(second["id"]), "10000")
    assert moved.returncode == 0 and f"job {second['id']} priority 10000" in moved.stdout
    shown = live.json("carol", "jobs", "show", str(second["id"]))
    assert shown["priority"] == 10000
    kinds = [e["kind"] for e in live.json("carol", "jobs", "events", str(second["id"]))]
    assert "priority" in kinds

    # Another user can neither see nor steer carol's jobs.
    live.login("dave")
    # (the live EDT is shared by the run's modules: dave may have jobs of his own there)
    seen = live.json("dave", "jobs", "list")
    assert {j["owner"] for j in seen} <= {"dave"}
    assert not {first["id"], second["id"]} & {j["id"] for j in seen}
    refused = live.edt("dave", "priority", str(second["id"]), "1")
    assert refused.returncode == 1 and "not yours" in refused.stderr
    assert live.json("carol", "jobs", "show", str(second["id"]))["priority"] == 10000
    # The lowest priority now, so that the first job's 3 epochs run even where the shared
    # EDT's other jobs leave carol one slot.
    lowered = live.edt("carol", "priority", str(second["id"]), "1")
    assert lowered.returncode == 0 and f"job {second['id']} priority 1" in lowered.stdout

    followed = live.edt("carol", "logs", str(first["id"]), "--follow", timeout=180)
    assert followed.returncode == 0, followed.stderr
    assert f"job {first['id']} COMPLETED" in followed.stderr
    assert any(" | " in line for line in followed.stdout.splitlines()), followed.stdout

    saved = live.tmp / "final.pt"
    got = live.edt("carol", "download", str(first["id"]), "-o", str(saved))
    assert got.returncode == 0, got.stderr
    state = torch.load(saved, weights_only=True)
    assert any(name.endswith("weight") for name in state)

    stopped = live.edt("carol", "stop", str(second["id"]))
    assert stopped.returncode == 0 and "STOPPED" in stopped.stdout
    states = {j["name"]: j["state"] for j in live.json("carol", "jobs")}
    assert states == {"first": "COMPLETED", "second": "STOPPED"}
    again = live.edt("carol", "logs", str(second["id"]), "--follow")
    assert again.returncode == 1 and "ended STOPPED" in again.stderr
    gone = live.edt("carol", "delete", str(second["id"]))
    assert gone.returncode == 0 and f"job {second['id']} deleted" in gone.stdout
    assert [j["name"] for j in live.json("carol", "jobs")] == ["first"]


def test_exit_codes_scripts_can_trust(live: LiveEdt) -> None:
    nobody = live.edt(None, "jobs", "list")
    assert nobody.returncode == 1 and "not logged in" in nobody.stderr
    usage = live.edt(None, "jobs", "show")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    wrong = live.edt(
        "erin",
        "login",
        "--url",
        live.url,
        "--user",
        "erin",
        "--password-stdin",
        stdin="not-her-password\n",
    )
    assert wrong.returncode == 1 and "wrong username or password" in wrong.stderr
    live.login("erin")
    missing = live.edt("erin", "jobs", "show", "999999")
    assert missing.returncode == 1
    assert missing.stderr == "edt: error: no job 999999: it does not exist or is not yours\n"
    bad = live.edt("erin", "submit", "--model", "1", "--dataset", "1", "--max-workers", "0")
    assert bad.returncode == 1 and "max_workers: " in bad.stderr
    # goodput mode's range goes as batch_min and batch_max, judged by the server's rules
    backwards = live.edt("erin", "submit", "--model", "1", "--dataset", "1", "--batch-range",
                         "64-32")  # fmt: skip
    assert (
        backwards.returncode == 1 and "batch_min: cannot exceed batch max (32)" in backwards.stderr
    )
    unreadable = live.edt("erin", "submit", "--model", "1", "--dataset", "1", "--batch-range", "64")
    assert unreadable.returncode == 2 and "write LOW-HIGH, e.g. 64-4096" in unreadable.stderr
    unreachable = live.edt("erin", "--url", f"http://127.0.0.1:{free_port()}", "jobs")
    assert unreachable.returncode == 1 and "cannot reach EDT" in unreachable.stderr


def test_an_oversized_archive_is_refused_before_it_is_sent(live: LiveEdt) -> None:
    live.login("erin")
    big = live.tmp / "big.tar.gz"
    with big.open("wb") as f:
        f.truncate(MAX_UPLOAD + 1)
    refused = live.edt("erin", "datasets", "upload", str(big))
    assert refused.returncode == 1
    assert f"limited to {MAX_UPLOAD:,} bytes (EDT_MAX_UPLOAD_BYTES)" in refused.stderr
    assert "big" not in [d["name"] for d in live.json("erin", "datasets", "list")]


def test_an_interrupted_upload_resumes_where_the_server_says(live: LiveEdt) -> None:
    import requests

    live.login("erin")
    token = json.loads((live.tmp / "config-erin" / "edt" / "credentials.json").read_text())
    headers = {"Authorization": f"Token {token['token']}"}
    archive = dataset_archive(live.tmp / "resume", train=128, test=32)
    content = archive.read_bytes()
    api = f"{live.url}/api/v1/datasets/uploads/"
    body = {"name": "resumed", "filename": archive.name, "size": len(content)}
    pk = requests.post(api, json=body, headers=headers).json()["id"]
    half = len(content) // 2
    sent = requests.put(
        f"{api}{pk}/",
        data=content[:half],
        headers={**headers, "Content-Range": f"bytes 0-{half - 1}/{len(content)}"},
    )
    assert sent.json()["received"] == half  # and then the connection dropped
    resumed = live.edt("erin", "--json", "datasets", "upload", str(archive), "--resume", str(pk))
    assert resumed.returncode == 0, resumed.stderr
    dataset = json.loads(resumed.stdout)
    assert (dataset["id"], dataset["status"], dataset["size"]) == (pk, "READY", len(content))


def test_logout_revokes_the_token(live: LiveEdt) -> None:
    live.login("dave")
    token = json.loads((live.tmp / "config-dave" / "edt" / "credentials.json").read_text())
    assert live.edt("dave", "logout").returncode == 0
    env = {"EDT_URL": live.url, "EDT_TOKEN": token["token"]}
    revoked = subprocess.run(
        [*edt_command(), "jobs"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert revoked.returncode == 1 and "log in again" in revoked.stderr


def test_the_console_script_entry_point_names_the_cli() -> None:
    import tomllib

    scripts = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["edt"].partition(":")
    assert callable(getattr(__import__(module, fromlist=[name]), name))


def test_staff_make_teams_and_groups_and_a_member_trains_in_a_team_its_lead_steers(
    live: LiveEdt,
) -> None:
    live.login("sam")  # staff
    made = live.edt(
        "sam", "admin", "users", "add", "frank", "--password-stdin", stdin="frank-pass-1\n"
    )
    assert made.returncode == 0 and "user frank made" in made.stdout, made.stderr
    rules = ("--rule", "host=gpu*,device=gpu,model=*H100*", "--rule", "device=gpu,slots=8")
    group = live.json("sam", "admin", "groups", "add", "cli-h100", *rules)
    assert group["rule_texts"] == ["host=gpu*,device=gpu,model=*H100*", "device=gpu,slots=8"]
    bad = live.edt("sam", "admin", "groups", "add", "cli-odd", "--rule", "device=tpu")
    assert bad.returncode == 1 and "a device kind is cpu or gpu" in bad.stderr
    team = live.json("sam", "admin", "teams", "add", "cli-vision", "--weight", "3",
                     "--guarantee", "1", "--limit", "2", "--allow", "cli-h100")  # fmt: skip
    assert (team["weight"], team["guarantee"], team["limit"]) == (3, 1, 2)
    assert team["allowed_groups"] == ["cli-h100"] and team["resource_group"] == "default"
    live.json("sam", "admin", "teams", "add", "cli-other")
    unsaid = live.edt("sam", "admin", "teams", "set", "cli-other")
    assert unsaid.returncode == 1 and "say what to change: --parent" in unsaid.stderr
    assert live.json("sam", "admin", "teams", "set", "cli-other", "--weight", "2")["weight"] == 2
    moved = live.json("sam", "admin", "groups", "set", "cli-h100", "--position", "7")
    assert moved["position"] == 7 and moved["rule_texts"] == group["rule_texts"]
    for user, flags in (("frank", ()), ("carol", ("--lead",))):
        added = live.edt("sam", "admin", "teams", "members", "cli-vision", "add", user, *flags)
        assert added.returncode == 0, added.stderr
    members = live.json("sam", "admin", "teams", "members", "cli-vision")
    assert {(m["username"], m["lead"], m["default"]) for m in members} == {
        ("frank", False, True), ("carol", True, True)}  # fmt: skip

    live.login("carol")
    refused = live.edt("carol", "admin", "teams", "add", "mine")
    assert refused.returncode == 1 and "only staff may make teams" in refused.stderr
    assert [t["name"] for t in live.json("carol", "admin", "teams", "list")] == ["cli-vision"]

    live.login("frank")
    archive = dataset_archive(live.tmp / "frank", train=256, test=32)
    live.json("frank", "datasets", "upload", str(archive), "--name", "frank-shapes")
    live.json("frank", "models", "upload", str(PROJECT_DIR / "examples" / "mlp.py"),
              "--name", "frank-mlp")  # fmt: skip
    common = ("--model", "frank-mlp", "--dataset", "frank-shapes", "--batch-size", "32")
    outside = live.edt("frank", "submit", *common, "--team", "cli-other")
    assert outside.returncode == 1 and "no team 'cli-other' of yours" in outside.stderr
    group_refused = live.edt("frank", "submit", *common, "--group", "cli-h100", "--team", "")
    assert group_refused.returncode == 1 and "a job without a team runs in default" in (
        group_refused.stderr
    )
    # Until stopped (5,000 epochs): on a busy machine 200 had ended before Carol's stop.
    job = live.json("frank", "submit", *common, "--epochs", "5000", "--team", "cli-vision")
    assert (job["team"], job["resource_group"]) == ("cli-vision", "default")

    # Carol leads the team: she sees the job and steers it; Dave, in no team, gets nothing.
    assert live.json("carol", "jobs", "show", str(job["id"]))["owner"] == "frank"
    moved = live.edt("carol", "priority", str(job["id"]), "9000")
    assert moved.returncode == 0, moved.stderr
    live.login("dave")
    hidden = live.edt("dave", "jobs", "show", str(job["id"]))
    assert hidden.returncode == 1 and "not yours" in hidden.stderr
    wait_for(lambda: live.json("frank", "jobs", "show", str(job["id"]))["workers"] >= 1, 120,
             "frank's job to train on a slot")  # fmt: skip
    wait_for(
        lambda: any(t["team"] == "cli-vision" and t["slot_hours"] > 0
                    for t in live.json("frank", "cluster")["usage"]["teams"]),
        30, "the team's slot-hours in `edt cluster`",
    )  # fmt: skip
    assert live.edt("carol", "stop", str(job["id"])).returncode == 0
    used = live.json("sam", "usage", "--by", "user", "--period", "week")
    assert any(r["user"] == "frank" and r["slot_hours"] > 0 for r in used["rows"])
    shown = live.edt("frank", "usage")
    assert shown.returncode == 0 and "cli-vision" in shown.stdout, shown.stdout
