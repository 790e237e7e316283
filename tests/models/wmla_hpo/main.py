#!/usr/bin/env python
# A WMLA hypersearch's model, written as WMLA's HPO notebooks ask: the trial's values come
# from config.json in the working directory ("Model update part 1 - Inject hyper-parameters"),
# and its test metrics go to $RESULT_DIR/val_dict_list.json ("Model update part 2 - Retrieve
# sub-training result metric"), rewritten after each evaluation and at the end of training.
# A tiny MLP on CIFAR-10 batches read without torchvision; each step sleeps a little so that
# a trial lasts long enough for Hyperband to stop a losing one early.

from __future__ import print_function

import glob
import json
import os
import pickle
import time

import numpy as np
import torch
import torch.nn.functional as F
from callbacks import LoggerCallback
from fabric_model import FabricModel
from torch import nn
from torch.utils.data import TensorDataset

PACE_SECONDS = 0.4

hyper_params = json.loads(open("config.json").read())
learning_rate = float(hyper_params.get("learning_rate", "0.01"))
hidden = int(hyper_params.get("hidden", "16"))
epochs = int(hyper_params.get("epochs", "1"))
print("config.json: learning_rate {} hidden {} epochs {}".format(learning_rate, hidden, epochs),
      flush=True)

DATA_DIR = os.getenv("DATA_DIR") or "/tmp"


def cifar(pattern):
    images, labels = [], []
    for path in sorted(glob.glob(os.path.join(DATA_DIR, "**", pattern), recursive=True)):
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images.append(batch[b"data"])
        labels.extend(batch[b"labels"])
    x = torch.from_numpy(np.concatenate(images).reshape(-1, 3, 32, 32)).float().div_(255)
    return TensorDataset(x, torch.tensor(labels, dtype=torch.int64))


def getDatasets():
    return cifar("data_batch_*"), cifar("test_batch")


class Paced(nn.Sequential):
    def forward(self, x):
        if self.training:
            time.sleep(PACE_SECONDS)
        return super().forward(x)


class HpoLogger(LoggerCallback):
    """Keeps every evaluation and writes them where WMLA's hypersearch reads them."""

    def __init__(self):
        self.test_metrics = []

    def log_test_metrics(self, loss, acc, completed_batch, worker=0):
        self.test_metrics.append({"steps": len(self.test_metrics) + 1, "loss": loss,
                                  "accuracy": acc / 100.0})
        self.write()

    def on_train_end(self):
        self.write()

    def write(self):
        with open("{}/val_dict_list.json".format(os.environ["RESULT_DIR"]), "w") as f:
            json.dump(self.test_metrics, f)


model = Paced(nn.Flatten(), nn.Linear(3 * 32 * 32, hidden), nn.ReLU(), nn.Linear(hidden, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)

if __name__ == "__main__":
    FabricModel(model, getDatasets, F.cross_entropy, optimizer,
                driver_logger=HpoLogger()).train(epochs, 32, 1)
