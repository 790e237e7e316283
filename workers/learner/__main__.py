"""A learner process: ``python -m workers.learner --spec SPEC.json --slot SLOT``.

Exit codes: 0 finished or left the job, 2 the user's code failed (reported to the job), 3
left the job because the state it was receiving at a resize is incomplete and no checkpoint
exists to go back to (a lost learner, to the coordinator): ``protocol.exits.Exit``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from pathlib import Path

import redis
import torch

from protocol.connection import REDIS_DOWN, connect
from protocol.exits import Exit
from protocol.jobstore import LEARNER_PATIENCE, JobStore, LeaseKeeper
from protocol.retry import patiently
from workers.learner.contract import UserCodeError
from workers.learner.engine import Learner
from workers.learner.loader import peak_memory
from workers.learner.spec import JobSpec
from workers.sandbox import user_limit


def user_frame(exc: BaseException, model_path: str) -> str:
    """The traceback line a user wants: the last frame in their own file, else the last."""
    if isinstance(exc, SyntaxError) and exc.filename == model_path:
        text = (exc.text or "").strip()
        return f'File "{Path(model_path).name}", line {exc.lineno}: {text}'
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename == model_path] or frames[-1:]
    if not mine:
        return ""
    f = mine[-1]
    return f'File "{Path(f.filename).name}", line {f.lineno}, in {f.name}: {f.line or ""}'.strip()


# Seconds a learner tries to reach Redis at its start. Its slot reached Redis a moment
# before starting it, so a learner that cannot is misconfigured (a socket or CA file it
# cannot open, a firewall between it and Redis): it exits with the error, and the job ends
# FAILED with it after a few starts, instead of waiting out LEARNER_PATIENCE each time.
FIRST_CONTACT = float(os.environ.get("EDT_LEARNER_FIRST_CONTACT") or 30)


def first_contact(client: redis.Redis) -> str:
    """ "" when Redis answers within FIRST_CONTACT seconds, else why it does not."""
    try:
        patiently(client.ping, REDIS_DOWN, FIRST_CONTACT)
    except REDIS_DOWN as exc:
        return f"{type(exc).__name__}: the learner cannot reach Redis: {exc}"
    return ""


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m workers.learner")
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--slot", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {args.slot} %(levelname)s %(message)s"
    )
    torch.set_num_threads(int(os.environ.get("EDT_TORCH_THREADS", "1")))
    logging.getLogger("edt.learner").info("%s: started (%.2f s)", args.slot,
                                          time.perf_counter() - started)  # fmt: skip
    spec = JobSpec.load(args.spec)
    client = connect(os.environ["REDIS_URL"])
    unreachable = first_contact(client)
    if unreachable:
        print(unreachable, file=sys.stderr, flush=True)  # what its slot reports (host.last_error)
        return Exit.CRASHED
    jobs = JobStore(client, spec.job_id, patience=LEARNER_PATIENCE)
    lease = LeaseKeeper(jobs, args.slot, jobs.dispatch_token(args.slot) or "local")
    learner = Learner(spec, args.slot, jobs, os.environ["REDIS_URL"])
    try:
        lease.start()  # a thread: the host's limit on them may be reached (user_limit)
        return learner.start()
    except (UserCodeError, Exception) as exc:
        traceback.print_exc()
        message = str(exc) if isinstance(exc, UserCodeError) else f"{type(exc).__name__}: {exc}"
        message = user_limit(exc) or message
        jobs.report_error(args.slot, message, user_frame(exc, str(Path(spec.model).resolve())))
        return Exit.USER_CODE_FAILED
    finally:
        learner.bookkeeping.records.close()  # what its thread had not written goes to the outbox
        if not jobs.flush(patience=LEARNER_PATIENCE):  # metrics kept while Redis was away
            logging.getLogger("edt.learner").error("%d metric record(s) could not be written",
                                                   len(jobs.outbox))  # fmt: skip
        lease.stop()
        logging.getLogger("edt.learner").info("%s: peak memory: %s", args.slot, peak_memory())


if __name__ == "__main__":
    sys.exit(main())
