"""WMLA's hypersearch requests as IBM's HPO notebooks send them: the request body, the
packed model folder and a client with Basic credentials (tests/test_wmla_hpo.py and the
tests that bound its sizes)."""

from __future__ import annotations

import io
import tarfile
from typing import Any

from rest_framework.test import APIClient

from tests.harness.processes import PROJECT_DIR

URL = "/platform/rest/deeplearning/v1/hypersearch"
SCRIPT = PROJECT_DIR / "tests" / "models" / "wmla_hpo" / "main.py"
ARGS = ("--exec-start edtPyTorch --model-main main.py --edt-options maxWorkers=2 "
        "--cs-datastore-meta type=fs,data_path=shapes --some-option 3")  # fmt: skip
PARAMS = [
    {"name": "learning_rate", "type": "Range", "dataType": "DOUBLE", "minDbVal": -5,
     "maxDbVal": -1, "power": "10", "step": "4",
     # what WMLA's notebook sends beside a DOUBLE range, unused
     "minIntVal": 0, "maxIntVal": 0, "discreteDbVal": [], "discreateStrVal": []},
    {"name": "hidden", "type": "Discrete", "dataType": "INT", "discreteIntVal": [16, 32]},
]  # fmt: skip


def request(**changes: Any) -> dict[str, Any]:
    algo = {"algorithm": "Hyperband", "maxRunTime": -1, "maxJobNum": 4, "maxParalleJobNum": 2,
            "objectiveMetric": "loss", "objective": "minimize", "hyperbandEta": 3.0,
            "algoParams": [{"name": "ResourceName", "value": "epochs"},
                           {"name": "ResourceValue", "value": "2"},
                           {"name": "RandomSeed", "value": "7"}]}  # fmt: skip
    data: dict[str, Any] = {"modelSpec": {"sigName": "edt-ig", "args": ARGS}, "algoDef": algo,
                            "hyperParams": PARAMS}  # fmt: skip
    for key, value in changes.items():
        if key in algo:
            algo[key] = value
        else:
            data[key] = value
    return data


def model_folder() -> bytes:
    """The model folder packed as the notebooks pack it (``.modelDir.tar``, gzip)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        tar.add(SCRIPT, arcname="hpo-model/main.py")
    return out.getvalue()


def basic(user: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=_basic(user, f"{user}-pass-1"))
    return client


def _basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
