"""The network as the predictor runs it: the trained model's function, on pixel values 0-255.

For LeNet, :class:`ServingLeNet` computes that function with cheaper operations. torch's
CPU ``max_pool2d`` is slow on LeNet's small NCHW maps: 43 us of a 220 us forward pass
for one image, 5.9 of 11 ms for 64, where two element-wise maxima of strided views take
31 us and 0.35 ms (2-core development machine, one torch thread). And the normalisation,
three element-wise passes over the input, folds into the first convolution.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from trainer.model import LeNet, normalize, pool_2x2


class ServingLeNet(nn.Module):
    """:class:`trainer.model.LeNet`'s forward pass on pixels 0-255, for inference.

    It shares LeNet's layers but the first, which takes the normalisation in. The same
    function: a 2x2 max-pool is the larger of each pair of rows, then of each pair of
    columns (exact); ReLU commutes with it, so it runs on the pooled quarter of the
    values; and the layers are called without ``nn.Module``'s per-call hook checks.
    """

    def __init__(self, net: LeNet, pixel_mean: float, pixel_std: float):
        super().__init__()
        self.conv1 = fold_normalisation(net.conv1, pixel_mean, pixel_std)
        self.conv2, self.fc1, self.fc2 = net.conv2, net.fc1, net.fc2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [N, classes] for pixel values 0-255 [N, 1, 28, 28]."""
        x = pool_2x2(convolve(self.conv1, x)).relu_()
        x = pool_2x2(convolve(self.conv2, x)).relu_()
        x = F.linear(x.flatten(1), self.fc1.weight, self.fc1.bias).relu_()
        return F.log_softmax(F.linear(x, self.fc2.weight, self.fc2.bias), dim=1)


class Normalising(nn.Module):
    """Any other network, behind the normalisation it was trained with."""

    def __init__(self, net: nn.Module, pixel_mean: float, pixel_std: float):
        super().__init__()
        self.net, self.pixel_mean, self.pixel_std = net, pixel_mean, pixel_std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The network's output for pixel values 0-255 [N, 1, 28, 28]."""
        return self.net(normalize(x, self.pixel_mean, self.pixel_std))


def serving_network(net: nn.Module, pixel_mean: float, pixel_std: float) -> nn.Module:
    """``net`` as the predictor runs it: on pixel values 0-255, in eval mode."""
    if type(net) is LeNet and net.conv1.padding == (0, 0):  # folding needs no padding
        return ServingLeNet(net, pixel_mean, pixel_std).eval()
    return Normalising(net, pixel_mean, pixel_std).eval()


def fold_normalisation(conv: nn.Conv2d, pixel_mean: float, pixel_std: float) -> nn.Conv2d:
    """``conv`` for pixels 0-255: it applies ``normalize`` (an affine map) to its input.

    normalize(x) = x * scale + shift; without padding every tap sees a pixel, so
    conv(normalize(x)) = (weight * scale) * x + (bias + shift * sum(weight)).
    """
    scale, shift = 1 / (255.0 * pixel_std), -pixel_mean / pixel_std
    folded = copy.deepcopy(conv).requires_grad_(False)
    with torch.no_grad():
        folded.bias.add_(conv.weight.sum(dim=(1, 2, 3)) * shift)
        folded.weight.mul_(scale)
    return folded


def convolve(layer: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``, with the layer's own settings, without the module call."""
    return F.conv2d(
        x, layer.weight, layer.bias, layer.stride, layer.padding, layer.dilation, layer.groups
    )
