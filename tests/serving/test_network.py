"""The network as served: the trained LeNet's function, computed with cheaper operations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from serving.loader import load_served_model
from serving.network import MatrixLeNet, Normalising, ServingLeNet, serving_network
from trainer.model import normalize


def test_served_network_computes_lenets_function(trained_model_dir, test_images):
    trained, card = load_served_model(trained_model_dir)
    served = serving_network(trained, card.pixel_mean, card.pixel_std)
    assert isinstance(served, ServingLeNet)
    assert served.fc1 is trained.fc1 and served.conv1 is not trained.conv1
    pixels = torch.from_numpy(test_images).float().reshape(-1, 1, 28, 28)
    with torch.inference_mode():
        inputs = normalize(pixels, card.pixel_mean, card.pixel_std)
        for count in (1, len(pixels)):
            expected = trained(inputs[:count])
            torch.testing.assert_close(served(pixels[:count]), expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("count", [1, 2, 32])
def test_matrix_products_compute_lenets_probabilities(trained_model_dir, test_images, count):
    """numpy's im2col products give the trained network's answers (float rounding aside)."""
    trained, card = load_served_model(trained_model_dir)
    matrix_net = MatrixLeNet(serving_network(trained, card.pixel_mean, card.pixel_std))
    pixels = test_images[:count].astype(np.float32)
    with torch.inference_mode():
        inputs = normalize(
            torch.from_numpy(pixels).reshape(-1, 1, 28, 28), card.pixel_mean, card.pixel_std
        )
        expected = trained(inputs).exp().numpy()
    got = matrix_net(pixels)
    assert got.dtype == np.float32 and got.shape == (count, 10)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    assert (got.argmax(axis=1) == expected.argmax(axis=1)).all()


def test_the_predictor_runs_the_served_form(model):
    assert isinstance(model.net, ServingLeNet)
    assert not model.net.training
    assert isinstance(model.matrix_net, MatrixLeNet)  # on the CPU, for one or two images


def test_other_networks_are_served_behind_the_normalisation():
    network = torch.nn.Flatten()
    served = serving_network(network, pixel_mean=0.5, pixel_std=0.25)
    assert isinstance(served, Normalising) and served.net is network
    pixels = torch.full((2, 1, 28, 28), 255.0)
    torch.testing.assert_close(served(pixels), torch.full((2, 784), 2.0))
