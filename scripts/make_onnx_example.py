#!/usr/bin/env python3
"""Writes graphs/small_cnn.onnx, the ONNX example of the README: a small image classifier
(conv + BatchNorm + ReLU, a depthwise conv, pooling, a linear head) exported by PyTorch with a
dynamic batch axis, plus an input batch and PyTorch's output for it as the reference
(graphs/small_cnn.inputs/). Needs Debian's python3-torch and python3-onnx; run from anywhere:

    /usr/bin/python3 scripts/make_onnx_example.py
"""
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "graphs")


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16)  # depthwise
        self.c3, self.b3 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, image):
        x = F.max_pool2d(F.relu(self.b1(self.c1(image))), 2)
        x = F.relu(self.b2(self.c2(x)))
        x = F.relu(self.b3(self.c3(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.softmax(self.fc(x), dim=-1)


def main():
    torch.manual_seed(0)
    m = SmallCNN()
    for bn in (m.b1, m.b2, m.b3):  # non-trivial running statistics, as a trained model has
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    m.eval()
    image = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    os.makedirs(os.path.join(ROOT, "small_cnn.inputs"), exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(m, (image,), os.path.join(ROOT, "small_cnn.onnx"), input_names=["image"],
                          output_names=["probs"], dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}},
                          opset_version=13, do_constant_folding=True)
        probs = m(image)
    np.save(os.path.join(ROOT, "small_cnn.inputs", "image.npy"), image.numpy())
    np.save(os.path.join(ROOT, "small_cnn.inputs", "probs.torch.npy"), probs.numpy())
    print("wrote graphs/small_cnn.onnx and graphs/small_cnn.inputs/{image,probs.torch}.npy")


if __name__ == "__main__":
    main()
