#!/usr/bin/env python
# The structure of the seeds' elastic-main.py (the WMLA notebooks' ResNet example): argv
# parsed for --numWorker, DATA_DIR from the environment, a Callback that schedules the
# learning rate through self.params['optimizer'], fn_step_train/fn_test, EDTLoggerCallback as
# driver_logger, main() under `if __name__ == '__main__'`. A small CNN on CIFAR-10 batches
# read without torchvision (EDT works offline).

from __future__ import print_function

import glob
import os
import pickle

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from callbacks import Callback
from edtcallback import EDTLoggerCallback
from fabric_model import FabricModel
from torch import nn
from torch.utils.data import TensorDataset


## Define model and extract training parameters
def get_max_worker():
    import argparse

    parser = argparse.ArgumentParser(description="EDT Example")
    parser.add_argument("--numWorker", type=int, default="16", help="input the max number ")
    parser.add_argument("--gpuPerWorker", type=int, default="1", help="GPUs per worker")
    args, _ = parser.parse_known_args()
    return args.numWorker * args.gpuPerWorker


BATCH_SIZE_PER_DEVICE = 32
NUM_EPOCHS = 2
MAX_NUM_WORKERS = get_max_worker()

START_LEARNING_RATE = 0.05
LR_STEP_SIZE = 1
LR_GAMMA = 0.5
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4

## Define dataset location
DATA_DIR = os.getenv("DATA_DIR")
if DATA_DIR is None:
    DATA_DIR = "/tmp"
print("DATA_DIR: " + DATA_DIR)
TRAIN_DATA = DATA_DIR
TEST_DATA = DATA_DIR


class LRScheduleCallback(Callback):
    def __init__(self, step_size, gamma):
        super(LRScheduleCallback, self).__init__()
        self.step_size = step_size
        self.gamma = gamma

    def on_epoch_begin(self, epoch):
        if (epoch != 0) and (epoch % self.step_size == 0):
            for param_group in self.params["optimizer"].param_groups:
                param_group["lr"] *= self.gamma
        print("LRScheduleCallback epoch={}, learning_rate={}".format(
            epoch, self.params["optimizer"].param_groups[0]["lr"]))


def cifar(root, pattern):
    images, labels = [], []
    for path in sorted(glob.glob(os.path.join(root, "**", pattern), recursive=True)):
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images.append(batch[b"data"])
        labels.extend(batch[b"labels"])
    x = torch.from_numpy(np.concatenate(images).reshape(-1, 3, 32, 32)).float().div_(255)
    return TensorDataset(x, torch.tensor(labels, dtype=torch.int64))


## Data loading function for EDT
def getDatasets():
    return (cifar(TRAIN_DATA, "data_batch_*"), cifar(TEST_DATA, "test_batch"))


def custom_train(model, data, eva, train_loader, fn_args):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inputs, labels = data
    inputs, labels = inputs.to(device), labels.to(device)
    opt = model.get_optimizer()
    opt.zero_grad()
    outputs = model(inputs)
    cri = model.get_loss_function()
    loss = cri(outputs, labels)
    loss.backward()
    acc = eva(outputs, labels)
    return acc, loss


def custom_test(model, test_iter, fn_args):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cri = model.get_loss_function()
    valid_loss = 0.0
    counter = 0
    for inputs, labels in test_iter:
        inputs, labels = inputs.to(device), labels.to(device)
        output = model(inputs)
        loss = cri(output, labels)
        valid_loss += loss.item()
        counter += 1
    valid_loss /= counter
    return valid_loss


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 16 * 16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.conv(x)), 2), 1))


def main(model_type):
    print("==> Building model.." + str(model_type))
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=START_LEARNING_RATE, momentum=MOMENTUM,
                          weight_decay=WEIGHT_DECAY)
    loss_function = F.cross_entropy

    edt_m = FabricModel(model, getDatasets, loss_function, optimizer, enable_onnx=True,
                        fn_step_train=custom_train, fn_test=custom_test,
                        user_callback=[LRScheduleCallback(LR_STEP_SIZE, LR_GAMMA)],
                        driver_logger=EDTLoggerCallback())
    print("==> epochs:" + str(NUM_EPOCHS) + ", batchsize:" + str(BATCH_SIZE_PER_DEVICE)
          + ", engines_number:" + str(MAX_NUM_WORKERS))
    edt_m.train(NUM_EPOCHS, BATCH_SIZE_PER_DEVICE, MAX_NUM_WORKERS, num_dataloader_threads=4,
                validation_freq=10, checkpoint_freq=0)


if __name__ == "__main__":
    main("smallcnn")
