# The seeds' EMetrics helper, in the same shape: a context manager whose record() appends one
# JSON line per call to $LOG_DIR/evaluation-metrics.txt.
import json
import os
import time


class EMetrics(object):
    TEST_GROUP = "test"

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, type, value, tb):
        self.close()

    @staticmethod
    def open(subId=None):
        folder = os.environ.get("LOG_DIR") or os.path.join(os.environ.get("JOB_STATE_DIR", "/tmp"), "logs")
        os.makedirs(folder, exist_ok=True)
        return EMetrics(open(os.path.join(folder, "evaluation-metrics.txt"), "a"))

    def record(self, group, iteration, values):
        line = {"group": group, "iteration": iteration, "time": int(time.time() * 1000),
                "values": values}
        self.f.write(json.dumps(line) + "\n")
        self.f.flush()

    def close(self):
        if self.f:
            self.f.close()
