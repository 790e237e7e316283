"""The CNN of examples/cnn.py written for IBM WMLA's Elastic Distributed Training.

Scripts like this run on EDT unchanged: `fabric_model`, `callbacks` and `pth_parameter_mgr`
are provided by the platform, and the values set on the job in EDT (epochs, batch size,
learning rate, maximum workers) override those the script passes to `train()`.
"""

import glob
import os
import pickle

import numpy as np
import pth_parameter_mgr
import torch
import torch.nn.functional as F
from callbacks import Callback, LoggerCallback
from fabric_model import FabricModel
from torch import nn
from torch.utils.data import TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 8 * 8, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def _batches(pattern):
    images, labels = [], []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images.append(batch[b"data"])
        labels.extend(batch[b"labels"])
    x = torch.from_numpy(np.concatenate(images).reshape(-1, 3, 32, 32)).float().div_(255)
    return TensorDataset(x, torch.tensor(labels, dtype=torch.int64))


def getDatasets():
    root = glob.glob(os.path.join(train_data_dir, "**", "data_batch_*"), recursive=True)
    folder = os.path.dirname(root[0])
    return _batches(os.path.join(folder, "data_batch_*")), _batches(
        os.path.join(folder, "test_batch")
    )


class PrintingLogger(LoggerCallback):
    # WMLA's signatures: accuracies in percent, completed_batch counts the iterations done
    def log_train_metrics(self, loss, acc, completed_batch, worker=0):
        if completed_batch % 10 == 0:
            print(f"train: batch {completed_batch} loss {loss:.4f} accuracy {acc:.1f}%", flush=True)

    def log_test_metrics(self, loss, acc, completed_batch, worker=0):
        print(f"test: after batch {completed_batch} loss {loss:.4f} accuracy {acc:.1f}%")


class EpochMarker(Callback):
    def on_epoch_end(self, epoch):
        print(f"epoch {epoch} ended", flush=True)


train_data_dir = pth_parameter_mgr.getTrainData(False)
model = Net()
optimizer = pth_parameter_mgr.getOptimizer(model)
epochs = pth_parameter_mgr.getEpoch()

edt_m = FabricModel(model, getDatasets, F.cross_entropy, optimizer,
                    driver_logger=PrintingLogger(), user_callback=[EpochMarker()])  # fmt: skip
edt_m.train(epochs, 64, 4)
