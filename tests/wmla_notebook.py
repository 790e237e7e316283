"""The code cells of IBM's "elastic distributed training via WMLA API" notebook (WMLA 1.2.3,
IBM/wmla-assets dli-learning-path/tutorials-cpd-wmla), one after the other, as a script.

Changed: the host, port, protocol, user and password (from the environment); the
``%%writefile`` cells copy the files they hold (tests/models/wmla_edt) instead of writing
them inline; pandas, matplotlib, seaborn and IPython (display only, not installed here)
are replaced by the standard library; the cell that shows running jobs is run until the
exec has ended, as a reader re-runs it. Every request is the notebook's.
"""

# In [1]:
import os
import shutil

model_dir = os.environ["WMLA_MODEL_DIR"]
model_main = "elastic-main.py"
model_callback = "edtcallback.py"
model_elog = "elog.py"

os.makedirs(model_dir, exist_ok=True)

# In [2] - [4]: %%writefile {model_dir}/{model_main}, {model_callback}, {model_elog} (and
# emetrics.py, which the notebook's model folder holds too)
for name in (model_main, model_callback, model_elog, "emetrics.py"):
    shutil.copy(os.path.join(os.environ["WMLA_MODEL_SOURCE"], name), model_dir)

# In [15]: Package model files for training
import datetime  # noqa: E402,F401
import json  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402

import requests  # noqa: E402


# In [25]:
def make_tarfile(output_filename, source_dir):
    with tarfile.open(output_filename, "w:gz") as tar:
        tar.add(source_dir, arcname=os.path.basename(source_dir))


MODEL_DIR_SUFFIX = ".modelDir.tar"
tempFile = tempfile.mktemp(MODEL_DIR_SUFFIX)
make_tarfile(tempFile, model_dir)

print(" tempFile: " + tempFile)
files = {"file": open(tempFile, "rb")}  # noqa: SIM115

# In [27]: Environment details
protocol = os.environ.get("WMLA_PROTOCOL", "https")
master_host = os.environ["WMLA_HOST"]
dli_rest_port = os.environ["WMLA_PORT"]
sc_rest_port = os.environ["WMLA_PORT"]

sc_rest_url = protocol + "://" + master_host + ":" + sc_rest_port + "/platform/rest/conductor/v1"
dl_rest_url = protocol + "://" + master_host + ":" + dli_rest_port + "/platform/rest/deeplearning/v1"

print(sc_rest_url)
print(dl_rest_url)

wmla_user = os.environ["WMLA_USER"]
wmla_pwd = os.environ["WMLA_PASSWORD"]
myauth = (wmla_user, wmla_pwd)
sigName = "elasticsig"
headers = {"Accept": "application/json"}
req = requests.Session()

# In [28]: Log on
r = requests.get(sc_rest_url + "/auth/logon", verify=False, auth=myauth, headers=headers)
if r.ok:
    print("\nLogon succeeded")
else:
    print("\nLogon failed with code={}, {}".format(r.status_code, r.content))

# In [29]: Check deep learning framework details
r = requests.get(dl_rest_url + "/execs/frameworks", auth=myauth, headers=headers, verify=False).json()
print(json.dumps(r, indent=4))

# In [30]: Arguments for API call
framework_name = "edtPyTorch"
dataset_location = "pytorch-mnist"
local_dir_containing_your_code = "resnet-wmla"
number_of_GPU = "2"
name_of_your_code_file = "elastic-main.py"

args = "--exec-start {} \
        --cs-datastore-meta type=fs,data_path={} \
        --model-dir {} \
        --edt-options maxWorkers={} \
        --model-main {} \
        ".format(framework_name, dataset_location, local_dir_containing_your_code, number_of_GPU,
                 name_of_your_code_file)
print("args: " + args)

# In [31]: Submit Job
r = requests.post(dl_rest_url + "/execs?sigName=" + sigName + "&args=" + args, files=files,
                  auth=myauth, headers=headers, verify=False)
if r.ok:
    exec_id = r.json()["id"]
    sig_id = r.json()["sigId"]
    driver_id = r.json()["submissionId"]
    print("\nModel submitted successfully \\Driver ID: {}".format(driver_id))
    print("Exec ID: {}".format(exec_id))
    print("SIG ID: {}".format(sig_id))
else:
    print("\nModel submission failed with code={}, {}".format(r.status_code, r.content))
    raise SystemExit(1)

# In [24]: Check status of all RUNNING jobs in SIG (rerun cell to refresh): re-run until the
# exec has ended
import time  # noqa: E402

state = ""
for _ in range(600):
    monitor = []
    r = requests.get(sc_rest_url + "/instances/" + sig_id + "/applications?state=RUNNING",
                     auth=myauth, headers=headers, verify=False).json()
    if len(r) == 0:
        print("No jobs running")
    else:
        monitor.append([(job["driver"]["id"], job["driver"]["state"], job["apprunduration"],
                         job["gpuslots"], job["gpumemused"]["total"], job["gpudevutil"]["total"])
                        for job in r])
        for job in r:
            executors = job["executors"]
        print(monitor)
    state = requests.get(dl_rest_url + "/execs/" + exec_id, auth=myauth, headers=headers).json()["state"]
    if state in ("FINISHED", "ERROR", "KILLED"):
        break
    time.sleep(1)
print("exec state: " + state)

# In [33]: Output: Retrieve Training Metric
r = requests.get(dl_rest_url + "/execs/" + exec_id + "/log", auth=myauth, headers=headers,
                 verify=False).json()
import csv  # noqa: E402
from io import StringIO  # noqa: E402

cols = ["timestamp", "global_steps", "iteration", "loss", "accuracy"]
rows = [row for row in csv.reader(StringIO(r.replace(":", ","))) if len(row) > 12]
final_data = [dict(zip(cols, (float(row[i]) for i in (4, 6, 8, 10, 12)), strict=True))
              for row in rows]
for row in final_data[:10]:
    row["timestamp2"] = datetime.datetime.fromtimestamp(row["timestamp"] / 1000)
    print(row)

# In [52]: Save Model
import urllib3  # noqa: E402

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


def download_trained_model(exec_id):
    headers = {"Accept": "application/octet-stream"}
    execURL = dl_rest_url + "/execs/" + exec_id + "/result"
    res = req.get(execURL, headers=headers, verify=False, auth=myauth)
    print(execURL)

    tmpfile = model_dir + "/" + exec_id + ".zip"
    print("Save model: ", tmpfile)
    with open(tmpfile, "wb") as f:
        f.write(res.content)
        f.close()


download_trained_model(exec_id)

# In [59]: Retrieve Training Driver Stdout Log
import pprint  # noqa: E402

retrieve_stdout_url = dl_rest_url + "/execs/" + exec_id + "/log?logType=outlog"
print("retrieve_stdout_url: " + retrieve_stdout_url)
r = requests.get(retrieve_stdout_url, auth=myauth, headers=headers, verify=False).json()
pprint.pprint(r)

# In [60]: Get Spectrum Conductor logs for training run
r = requests.get(sc_rest_url + "/instances/" + sig_id + "/applications/" + driver_id
                 + "/logs/stdout/download", auth=myauth,
                 headers={"Accept": "application/octet-stream"}, verify=False)
print(r.text)

# In [61]: Retrieve Training Driver Stderr Log
r = requests.get(sc_rest_url + "/instances/" + sig_id + "/applications/" + driver_id
                 + "/logs/stderr/download", auth=myauth,
                 headers={"Accept": "application/octet-stream"}, verify=False)
print(r.text)
