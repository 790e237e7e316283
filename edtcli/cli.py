"""`edt`: EDT from a terminal or a script.

Exit status: 0 done; 1 the server refused or failed (its message is printed on stderr), or
the job followed by `logs --follow` did not complete; 2 the command line is wrong.
Every read command takes ``--json``. Progress bars go to stderr.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable, Sequence
from typing import Any

from edtcli import commands, config
from edtcli.client import Client, CliError
from edtcli.commands import show

Handler = Callable[[argparse.Namespace, Client], None]


def login(args: argparse.Namespace) -> None:
    """Trade the password for a token and keep it (mode 0600) under the config dir."""
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.user} at {args.url}: ")
    if not password:
        raise CliError("no password given")
    url = args.url.rstrip("/")
    answer = Client(url).call("POST", "auth/token/", {"username": args.user, "password": password})
    path = config.save(url, answer["username"], answer["token"])
    show(args, {"url": url, "username": answer["username"], "credentials": str(path)},
         f"logged in to {url} as {answer['username']} (token in {path})")  # fmt: skip


def logout(args: argparse.Namespace) -> None:
    saved = config.load()
    if saved.get("url") and saved.get("token"):
        try:
            Client(saved["url"], saved["token"]).call("DELETE", "auth/token/")
        except CliError as exc:
            print(f"edt: the server did not revoke the token: {exc}", file=sys.stderr)
    forgot = config.forget()
    show(args, {"logged_out": forgot}, "logged out" if forgot else "not logged in")


def whoami(args: argparse.Namespace, api: Client) -> None:
    me = api.call("GET", "auth/me/")
    show(args, {**me, "url": api.url}, f"{me['username']} at {api.url}")


def client_for(args: argparse.Namespace) -> Client:
    saved = config.load()
    url = args.url or saved.get("url")
    if not url or not saved.get("token"):
        raise CliError("not logged in: run `edt login --url URL --user NAME` first")
    return Client(url, saved["token"])


# The command line ------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="edt", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    top.add_argument("--url", help="EDT's address (default: the one you logged in to)")
    top.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    top.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON (for scripts)")  # fmt: skip
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(parent: Any, name: str, handler: Any, helptext: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(name, parents=[common], help=helptext,
                                                       description=helptext)  # fmt: skip
        p.set_defaults(handler=handler)
        return p

    p = add(sub, "login", login, "log in and keep a token under your config directory")
    p.add_argument("--url", required=True, help="e.g. http://127.0.0.1:8000")
    p.add_argument("--user", required=True)
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    add(sub, "logout", logout, "revoke the token and forget it")
    add(sub, "whoami", whoami, "who the stored token belongs to")
    _datasets(add, sub)
    _models(add, sub)
    _jobs(add, sub)
    _sweeps(add, sub)
    add(sub, "cluster", commands.cluster, "slots, their jobs, the queue, and usage by team")
    p = add(sub, "usage", commands.usage, "slot-hours of the jobs you may see, per team or user")
    p.add_argument("--since", help="a date, a date and time, or 12h, 7d, 2w back (default 7d)")
    p.add_argument("--until", help="as --since (default: now)")
    p.add_argument("--by", choices=["team", "user"], default="team")
    p.add_argument("--period", choices=["day", "week"], default="day")
    p = add(sub, "share", commands.share, "why your teams have their shares (staff: every team)")
    p.add_argument("team", nargs="?", help="only this team")
    _admin(add, sub)
    return top


def _sweeps(add: Any, sub: Any) -> None:
    group = sub.add_parser("sweep", help="hyperparameter sweeps: create, list, show, stop, "
                           "resume, clone")  # fmt: skip
    inner = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add(
        inner,
        "create",
        commands.sweep_create,
        "search hyperparameters: each trial is a job, trials that fall behind stop early",
    )
    p.add_argument("--space", required=True, metavar="FILE",
                   help="the search space, YAML or JSON: name -> {type: uniform|loguniform|int|"
                   "choice, low, high, step, choices}")  # fmt: skip
    p.add_argument("--model", required=True, help="model id or name (a native model)")
    p.add_argument("--dataset", required=True, help="dataset id or name")
    p.add_argument("--objective", required=True, help="the metric: loss, accuracy, test_loss...")
    p.add_argument("--direction", choices=["minimize", "maximize"], help="default minimize")
    p.add_argument("--algorithm", choices=["random", "grid", "tpe", "asha", "hyperband"],
                   help="default random; asha and hyperband stop trials early")  # fmt: skip
    p.add_argument("--trials", type=int, help="the budget of trials (default 10; grid: all)")
    p.add_argument("--parallel", type=int, help="trials at once (default 1)")
    p.add_argument(
        "--max-time",
        type=commands.duration,
        metavar="T",
        help="no trial starts after T (600, 90s, 10m, 2h; default no limit)",
    )
    p.add_argument("--max-workers", type=int, help="slots per trial at most")
    for flag, kind in (("--name", str), ("--epochs", int), ("--batch-size", int),
                       ("--lr", float), ("--min-workers", int), ("--priority", int),
                       ("--checkpoint-every", int), ("--max-micro-batch", int),
                       ("--seed", int), ("--reduction-factor", int),
                       ("--min-resource", int)):  # fmt: skip
        p.add_argument(flag, type=kind)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"])
    add(inner, "list", commands.sweeps_list, "your sweeps").add_argument("--state")
    add(inner, "show", commands.sweeps_show, "a sweep: progress, best trial, trials").add_argument(
        "id", type=int
    )
    add(inner, "stop", commands.sweep_stop, "stop a sweep and its trials").add_argument(
        "id", type=int
    )
    add(inner, "resume", commands.sweep_resume, "resume a stopped sweep").add_argument(
        "id", type=int
    )
    p = add(inner, "clone", commands.sweep_clone, "a new sweep asking the same")
    p.add_argument("id", type=int)
    p.add_argument("--name")
    p = add(
        sub,
        "compare",
        commands.compare,
        "jobs side by side: their configurations (differences marked) and final metrics",
    )
    p.add_argument("jobs", type=int, nargs="+", metavar="JOB")


def _datasets(add: Any, sub: Any) -> None:
    group = sub.add_parser("datasets", help="upload, add in place, list, show, delete datasets")
    inner = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    add(inner, "list", commands.datasets_list, "your datasets")
    add(inner, "show", commands.datasets_show, "one dataset").add_argument("id", type=int)
    p = add(inner, "upload", commands.datasets_upload, "upload a .zip, .tar or .tar.gz")
    p.add_argument("path")
    p.add_argument("--name", help="default: the file's name")
    p.add_argument("--resume", type=int, metavar="ID", help="continue an interrupted upload")
    p.add_argument("--no-wait", action="store_true", help="do not wait until it is READY")
    p = add(inner, "add", commands.datasets_add, "register a dataset in place, under a data root")
    p.add_argument("--path", required=True, help="on the cluster's shared storage (EDT_DATA_ROOTS)")
    p.add_argument("--name", required=True)
    p.add_argument("--no-wait", action="store_true", help="return before the check ends")
    add(inner, "delete", commands.datasets_delete, "delete a dataset").add_argument("id", type=int)


def _models(add: Any, sub: Any) -> None:
    group = sub.add_parser("models", help="upload, list, show, delete model definitions")
    inner = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    add(inner, "list", commands.models_list, "your model definitions")
    add(inner, "show", commands.models_show, "one model and its check").add_argument("id", type=int)
    p = add(inner, "upload", commands.models_upload, "upload a .py file or an archive")
    p.add_argument("path")
    p.add_argument("--name", help="default: the file's name")
    p.add_argument("--entry", help="the entry module inside an archive")
    p.add_argument("--no-wait", action="store_true", help="do not wait for the check")
    add(inner, "delete", commands.models_delete, "delete a model").add_argument("id", type=int)


def _jobs(add: Any, sub: Any) -> None:
    p = add(sub, "submit", commands.submit, "submit a training job")
    p.add_argument("--model", required=True, help="model id or name")
    p.add_argument("--dataset", required=True, help="dataset id or name")
    # A value left out is EDT's default (the server's: the Train form's and the API's).
    p.add_argument("--max-workers", type=int, help="the most slots (GPUs)")
    for flag, kind in (("--min-workers", int), ("--priority", int), ("--epochs", int),
                       ("--batch-size", int), ("--lr", float), ("--checkpoint-every", int),
                       ("--max-micro-batch", int), ("--name", str)):  # fmt: skip
        p.add_argument(flag, type=kind)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"],
                   help="bf16: autocast on CPU or GPU; fp16: GPU only")  # fmt: skip
    p.add_argument(
        "--image-size",
        type=int,
        metavar="PIXELS",
        help="an image folder's images: shorter side scaled to this, centre cut",
    )
    p.add_argument(
        "--loader-workers",
        type=int,
        metavar="N",
        help="DataLoader worker processes per learner (default: the slot's share)",
    )
    p.add_argument(
        "--augment",
        type=int,
        choices=[0, 1],
        help="1: random crop, flip and normalisation, seeded by job and epoch",
    )
    p.add_argument("--batch-range", type=batch_range, metavar="LOW-HIGH",
                   help="goodput mode: the scheduler picks the global batch in this range "
                   "(e.g. 64-4096); --batch-size is then the batch the learning rate is "
                   "given for")  # fmt: skip
    p.add_argument("--team", help="a team of yours (default: your default team); '' for none")
    p.add_argument("--group", help="a resource group the team may use (default: the team's)")
    jobs = add(sub, "jobs", commands.jobs_list, "list jobs, or show one")
    jobs.add_argument("--state", help="only jobs in this state")
    inner = jobs.add_subparsers(dest="action", metavar="ACTION")
    add(inner, "list", commands.jobs_list, "your jobs").add_argument("--state")
    add(inner, "show", commands.jobs_show, "one job").add_argument("job", type=int)
    add(inner, "events", commands.jobs_events, "a job's timeline").add_argument("job", type=int)
    p = add(inner, "metrics", commands.jobs_metrics, "a job's metrics history")
    p.add_argument("job", type=int)
    p.add_argument("--points", type=int, default=200, help="about this many (default 200)")
    p = add(sub, "logs", commands.logs, "print a job's learner logs")
    p.add_argument("job", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="until the job ends")
    p.add_argument("--slot", help="one learner's log only")
    p = add(sub, "why", commands.why, "why a job waits, or has the slots it has")
    p.add_argument("job", type=int)
    p = add(sub, "priority", commands.priority, "change a job's priority (higher: more slots)")
    p.add_argument("job", type=int)
    p.add_argument("value", type=int)
    p.add_argument("--preview", action="store_true", help="only say what would change")
    add(sub, "stop", commands.stop, "stop a job").add_argument("job", type=int)
    add(sub, "delete", commands.delete, "delete an ended job and its files").add_argument(
        "job", type=int
    )
    p = add(sub, "download", commands.download, "download the final model or a checkpoint")
    p.add_argument("job", type=int)
    p.add_argument("--file", default="model.pt", help="model.pt (default) or a checkpoint")
    p.add_argument("-o", "--output", help="file or folder to write to")


def batch_range(text: str) -> tuple[int, int]:
    """ "64-4096" -> (64, 4096); the server judges the values (the web's rules)."""
    low, sep, high = text.partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise argparse.ArgumentTypeError(f"write LOW-HIGH, e.g. 64-4096, not {text!r}")
    return int(low), int(high)


def _admin(add: Any, sub: Any) -> None:
    """``edt admin``: users, teams, members and resource groups (the server says 403 to
    anyone but staff)."""
    admin = sub.add_parser("admin", help="staff: users, teams, resource groups")
    rooms = admin.add_subparsers(dest="room", required=True, metavar="WHAT")

    users = rooms.add_parser("users", help="make and list users").add_subparsers(
        dest="action", required=True, metavar="ACTION")  # fmt: skip
    p = add(users, "add", commands.admin_users_add, "make a user")
    p.add_argument("name")
    p.add_argument("--staff", action="store_true", help="sees everything, writes teams")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    add(users, "list", commands.admin_users_list, "every user and their teams")

    teams = rooms.add_parser("teams", help="make, change, list teams; their members")
    inner = teams.add_subparsers(dest="action", required=True, metavar="ACTION")
    team_commands = (("add", commands.admin_teams_add, "make a team"),
                     ("set", commands.admin_teams_set, "change a team"))  # fmt: skip
    for name, handler, helptext in team_commands:
        p = add(inner, name, handler, helptext)
        p.add_argument("name")
        p.add_argument("--parent", help="the team it belongs to ('' for none)")
        p.add_argument("--weight", type=int, help="its share beside its sibling teams (1)")
        p.add_argument("--guarantee", type=int, help="slots it is owed when it asks (0)")
        p.add_argument("--limit", type=int, help="the most slots it may hold (none)")
        p.add_argument("--no-limit", action="store_true", help="take its limit away")
        p.add_argument("--group", help="its resource group (default)")
        p.add_argument("--allow", action="append", metavar="GROUP",
                       help="another group its jobs may use (repeat it)")  # fmt: skip
        p.add_argument("--shrink-idle", action=argparse.BooleanOptionalAction, default=None,
                       help="shrink its (and sub-teams') idle jobs to their minimum")  # fmt: skip
    add(inner, "list", commands.admin_teams_list, "the teams (yours, unless you are staff)")
    add(inner, "delete", commands.admin_teams_delete, "delete a team without jobs").add_argument(
        "name"
    )
    p = add(inner, "members", commands.admin_teams_members, "list, add or remove members")
    p.add_argument("team")
    p.add_argument("change", nargs="?", choices=["add", "remove", "list"], default="list")
    p.add_argument("user", nargs="?")
    p.add_argument("--lead", action=argparse.BooleanOptionalAction, default=None,
                   help="may change the priority of the team's jobs and stop them")  # fmt: skip
    p.add_argument("--default", action="store_true", help="make it the user's default team")

    groups = rooms.add_parser("groups", help="resource groups and their rules")
    inner = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    group_commands = (("add", commands.admin_groups_add, "make a group"),
                      ("set", commands.admin_groups_set, "change a group"))  # fmt: skip
    for name, handler, helptext in group_commands:
        p = add(inner, name, handler, helptext)
        p.add_argument("name")
        p.add_argument("--rule", action="append", metavar="RULE",
                       help="e.g. host=gpu*,device=gpu,model=*H100*,slots=8; repeat it, in "
                       "order (set: replaces them all)")  # fmt: skip
        p.add_argument("--position", type=int, help="groups' rules are tried in this order")
        p.add_argument("--shrink-idle", action=argparse.BooleanOptionalAction, default=None,
                       help="shrink its idle jobs to their minimum")  # fmt: skip
    add(inner, "list", commands.admin_groups_list, "the groups and their rules")
    add(inner, "delete", commands.admin_groups_delete, "delete an unused group").add_argument(
        "name"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.handler in (login, logout):
            args.handler(args)
        else:
            args.handler(args, client_for(args))
    except CliError as exc:
        print(f"edt: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("edt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return 0
