"""The reference network and the model directory contract."""

import json

import pytest
import torch
import torch.nn.functional as F

from trainer.model import (
    BatchNormLeNet,
    LeNet,
    build_model,
    load_model_dir,
    normalize,
    pool_2x2,
    save_model_dir,
    saved_network,
    training_network,
)
from trainer.model_dir import ModelCard


def test_reference_network_shape_and_size():
    model = build_model()
    out = model(torch.zeros(3, 1, 28, 28))
    assert out.shape == (3, 10)
    # conv 1->20 5x5, conv 20->50 5x5, fc 800->500, fc 500->10 (the article's network)
    assert sum(p.numel() for p in model.parameters()) == 520 + 25_050 + 400_500 + 5_010
    assert torch.allclose(out.exp().sum(1), torch.ones(3))


def test_normalize_accepts_flat_and_square_images():
    images = torch.full((2, 784), 255, dtype=torch.uint8)
    out = normalize(images, mean=0.5, std=0.25)
    assert out.shape == (2, 1, 28, 28)
    assert torch.allclose(out, torch.full_like(out, 2.0))


def _card():
    return ModelCard(
        "lenet", [str(i) for i in range(10)], 0.286, 0.353, metrics={"accuracy": 0.9, "loss": 0.3}
    )


def test_model_dir_round_trip(tmp_path):
    torch.manual_seed(0)
    model = build_model().eval()
    save_model_dir(model, tmp_path, _card())
    loaded, card = load_model_dir(tmp_path)
    x = torch.randn(4, 1, 28, 28)
    assert torch.equal(loaded(x), model(x))
    assert card.metrics == {"accuracy": 0.9, "loss": 0.3}
    assert "torch" in card.versions
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert set(state) == set(model.state_dict())
    assert not list(tmp_path.glob(".*tmp"))


def test_bad_model_dirs_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model.pt"):
        load_model_dir(tmp_path)
    save_model_dir(build_model(), tmp_path, _card())
    (tmp_path / "model.json").write_text("{not json")
    with pytest.raises(ValueError, match="malformed model card"):
        load_model_dir(tmp_path)
    card = json.loads(json.dumps(_card().__dict__))
    card["architecture"] = "resnet"
    (tmp_path / "model.json").write_text(json.dumps(card))
    with pytest.raises(ValueError, match="unknown architecture 'resnet'"):
        load_model_dir(tmp_path)


def _article_forward(net, x):
    """The article's ``Net.forward``: ReLU, then ``max_pool2d``."""
    x = F.max_pool2d(F.relu(net.conv1(x)), 2)
    x = F.max_pool2d(F.relu(net.conv2(x)), 2)
    x = F.relu(net.fc1(x.flatten(1)))
    return F.log_softmax(net.fc2(x), dim=1)


@pytest.mark.parametrize("channels_last", [False, True])
def test_forward_is_the_articles_function_values_and_gradients(channels_last):
    """LeNet pools before its ReLU; the article's forward pass pools after it."""
    torch.manual_seed(0)
    model = build_model()
    x = torch.randn(16, 1, 28, 28)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (16,))
    results = []
    for forward in (model, lambda images: _article_forward(model, images)):
        model.zero_grad()
        out = forward(x)
        F.nll_loss(out, labels).backward()
        results.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    (out, grads), (expected, expected_grads) = results
    torch.testing.assert_close(out, expected)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad)


def test_pooling_is_max_pool2d():
    generator = torch.Generator().manual_seed(0)
    for shape in ((3, 20, 24, 24), (2, 50, 8, 8)):
        maps = torch.randn(shape, generator=generator)
        assert torch.equal(pool_2x2(maps), F.max_pool2d(maps, 2))


@pytest.mark.parametrize("channels_last", [False, True])
def test_evaluation_pools_differently_to_the_same_values(channels_last):
    """Without gradients LeNet pools with strided maxima (cheaper on the CPU): same output."""
    torch.manual_seed(0)
    model = build_model().eval()
    x = torch.randn(32, 1, 28, 28).round()  # rounded inputs make ties in the pooled maps
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        evaluated = model(x)
    assert torch.equal(evaluated, model(x).detach())


@pytest.mark.parametrize("channels_last", [False, True])
def test_folded_network_is_a_plain_lenet_computing_the_same(channels_last):
    """Folding each norm (running statistics, scale, shift) into the layer before it."""
    torch.manual_seed(0)
    net = BatchNormLeNet()
    for norm in (net.conv2_norm, net.fc1_norm):  # statistics and affines of a trained net
        size = norm.num_features
        norm.running_mean.copy_(torch.randn(size))
        norm.running_var.copy_(torch.rand(size) * 3 + 0.05)
        norm.weight.data.copy_(torch.randn(size))  # some negative: max-pool sees the sign
        norm.bias.data.copy_(torch.randn(size))
    net.eval()
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    folded = saved_network(net)
    x = torch.randn(6, 1, 28, 28)
    assert type(folded) is LeNet and not folded.training
    assert set(folded.state_dict()) == set(LeNet().state_dict())
    with torch.no_grad():
        assert torch.allclose(folded(x), net(x), atol=1e-5)
        unnormed = LeNet()
        unnormed.load_state_dict(
            {key: value for key, value in net.state_dict().items() if "norm" not in key}
        )
        assert not torch.allclose(unnormed(x), net(x), atol=0.1)  # the norms matter here


def test_without_batch_norm_the_trained_network_is_the_saved_one():
    net = training_network(batch_norm=False)
    assert type(net) is LeNet and saved_network(net) is net
    assert type(training_network(batch_norm=True)) is BatchNormLeNet


def test_a_training_batch_of_one_example_uses_the_running_statistics():
    """An epoch's last batch can hold one example (129 examples at batch 128)."""
    torch.manual_seed(0)
    net = BatchNormLeNet().train()
    net(torch.randn(8, 1, 28, 28)).sum().backward()  # a batch of 8 updates the statistics
    before = {key: value.clone() for key, value in net.state_dict().items() if "running" in key}
    one = torch.randn(1, 1, 28, 28)
    out = net(one)
    out.sum().backward()
    after = {key: value for key, value in net.state_dict().items() if "running" in key}
    assert all(torch.equal(before[key], after[key]) for key in before)
    assert torch.allclose(out, net.eval()(one))
