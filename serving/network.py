"""The network as the predictor runs it: the trained model's function, on pixel values 0-255.

For LeNet, :class:`ServingLeNet` computes that function with cheaper operations. torch's
CPU ``max_pool2d`` is slow on LeNet's small NCHW maps: 43 us of a 220 us forward pass
for one image, 5.9 of 11 ms for 64, where two element-wise maxima of strided views take
31 us and 0.35 ms (2-core development machine, one torch thread). And the normalisation,
three element-wise passes over the input, folds into the first convolution.

On the CPU, :class:`MatrixLeNet` computes the same function as four numpy matrix
products: in a server, between requests, the HTTP and JSON work evicts the caches, and
torch's operator calls then cost 0.36 ms for one image against 0.2 ms in a loop; numpy's
shorter calls keep it at ~0.2 ms (docs/serving.md, "Where a request's time goes").
"""

from __future__ import annotations

import copy

import numpy as np
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


class MatrixLeNet:
    """:class:`ServingLeNet`'s function on the CPU: numpy arrays in and out, no torch calls.

    Each convolution is one matrix product of the maps' patches (the window at each
    position) with the filters. The maps stay channels-last: a product's rows are the next
    layer's pixels, pooling is two strided maxima, and a window is ``size`` runs of
    ``size * channels`` adjacent values, copied fast. The filters and fc1's columns are
    reordered once from torch's channels-first order to that one.
    """

    def __init__(self, net: ServingLeNet):
        self.convs = [conv_as_matrix(net.conv1), conv_as_matrix(net.conv2)]
        channels = net.conv2.out_channels
        fc1 = net.fc1.weight.detach().cpu().reshape(net.fc1.out_features, channels, -1)
        self.fc1 = as_array(fc1.transpose(1, 2).reshape(net.fc1.out_features, -1).T)
        self.fc1_bias = as_array(net.fc1.bias)
        self.fc2, self.fc2_bias = as_array(net.fc2.weight.T), as_array(net.fc2.bias)

    def __call__(self, pixels: np.ndarray) -> np.ndarray:
        """Class probabilities float32 [N, classes] for pixel values 0-255 float32 [N, 28, 28]."""
        maps = pixels[..., np.newaxis]  # [N, H, W, channels]
        for weights, bias, size in self.convs:
            maps = pool_channels_last(convolve_as_matrix(maps, weights, bias, size))
            np.maximum(maps, 0, out=maps)
        hidden = maps.reshape(len(maps), -1) @ self.fc1
        hidden += self.fc1_bias
        np.maximum(hidden, 0, out=hidden)
        logits = hidden @ self.fc2
        logits += self.fc2_bias
        # exp(log_softmax), as the torch network's answer is computed
        logits -= logits.max(axis=1, keepdims=True)
        logits -= np.log(np.exp(logits).sum(axis=1, keepdims=True))
        return np.exp(logits)


def as_array(tensor: torch.Tensor) -> np.ndarray:
    """A C-contiguous float32 numpy copy of a parameter."""
    return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=np.float32)


def conv_as_matrix(conv: nn.Conv2d) -> tuple[np.ndarray, np.ndarray, int]:
    """A convolution's filters as a matrix [rows * columns * in, out], its bias, its size."""
    weights = conv.weight.detach().permute(2, 3, 1, 0)  # [rows, columns, in, out]
    return (
        as_array(weights.reshape(-1, conv.out_channels)),
        as_array(conv.bias),
        conv.kernel_size[0],
    )


def convolve_as_matrix(maps: np.ndarray, weights: np.ndarray, bias: np.ndarray, size: int):
    """A valid, stride-1 convolution of C-contiguous channels-last maps [N, H, W, C]."""
    count, height, width, channels = maps.shape
    out_height, out_width = height - size + 1, width - size + 1
    maps = np.ascontiguousarray(maps)
    image, row, pixel, _ = maps.strides
    # [N, H', W', size, size * C]: the window at each output pixel, a view of ``maps``
    # (its last axis runs over adjacent pixels' channels, contiguous in memory).
    windows = np.ndarray(
        (count, out_height, out_width, size, size * channels),
        maps.dtype,
        maps,
        strides=(image, row, pixel, row, maps.itemsize),
    )
    out = windows.reshape(count * out_height * out_width, -1) @ weights
    out += bias
    return out.reshape(count, out_height, out_width, -1)


def pool_channels_last(maps: np.ndarray) -> np.ndarray:
    """2x2 max-pooling of channels-last maps [N, H, W, C] (even H and W)."""
    maps = np.maximum(maps[:, 0::2], maps[:, 1::2])
    return np.maximum(maps[:, :, 0::2], maps[:, :, 1::2])


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
