"""Where a process sits, read from each launcher's env; a TrainJob's two nodes for real."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from components.runtime.ports import free_port
from trainer.distributed import LaunchError, LaunchRanks, launch_ranks, processes_per_node
from trainer.metrics import parse_metric_lines
from trainer.model import select_device

REPO = Path(__file__).resolve().parents[2]
# What a launcher may have left in this shell; a TrainJob pod has none of it.
LAUNCHER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def trainjob_node_env(node_rank: int, nodes: int = 2, per_node: str = "1") -> dict[str, str]:
    """The env Kubeflow Trainer's torch plugin gives node ``node_rank`` of TrainJob ``fmnist``.

    kubeflow/trainer at tags v2.1.0 and v2.3.0, ``pkg/runtime/framework/plugins/torch/torch.go``
    (``EnforceMLPolicy``) with the names from ``pkg/constants/constants.go``: PET_NNODES
    (numNodes), PET_NPROC_PER_NODE (numProcPerNode: an int; ``auto`` is passed on as
    ``auto`` when the node has GPUs and turned into its CPU count when not; v2.1 also takes
    ``cpu``, turned into the CPU count, and ``gpu``, passed on), PET_NODE_RANK (the Job
    completion index), PET_MASTER_ADDR (``<trainjob>-node-0-0.<trainjob>``) and
    PET_MASTER_PORT (29500). The runtime ``manifests/base/runtimes/torch_distributed.yaml``
    (ClusterTrainingRuntime ``torch-distributed``) adds no env of its own.
    """
    return {
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": per_node,
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": "fmnist-node-0-0.fmnist",
        "PET_MASTER_PORT": "29500",
    }


TORCHRUN = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "fmnist-node-0-0.fmnist",
    "MASTER_PORT": "29500",
}


@pytest.mark.parametrize(
    ("case", "env", "expected"),
    [
        ("no launcher", {}, LaunchRanks()),
        (
            "PyTorchJob pod, no torchrun",
            {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "23456"},
            LaunchRanks(rank=1, world_size=2),
        ),
        ("torchrun", TORCHRUN, LaunchRanks(3, 1, 4, 2, "env://")),
        # torchrun in a TrainJob pod: the PET_* it read stay in the env; its own vars win.
        ("torchrun in a TrainJob", {**trainjob_node_env(1), **TORCHRUN}, LaunchRanks(3, 1, 4, 2)),
        (
            "TrainJob node 1, python -m trainer",
            trainjob_node_env(1),
            LaunchRanks(1, 0, 2, 1, "tcp://fmnist-node-0-0.fmnist:29500"),
        ),
        (
            "one-node TrainJob",
            trainjob_node_env(0, nodes=1),
            LaunchRanks(0, 0, 1, 1, "tcp://fmnist-node-0-0.fmnist:29500"),
        ),
    ],
)
def test_ranks_from_each_launchers_env(case, env, expected):
    assert launch_ranks(env) == expected, case


@pytest.mark.parametrize("per_node", ["2", "cpu", "auto"])
def test_several_processes_per_node_need_torchrun(per_node, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(LaunchError, match=rf"PET_NPROC_PER_NODE={per_node} asks for \d processes"):
        launch_ranks(trainjob_node_env(0, per_node=per_node))


def test_processes_per_node_resolves_like_torchrun(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert [processes_per_node(v) for v in ("3", "auto", "gpu", "cpu")] == [3, 1, 1, 8]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert processes_per_node("auto") == 8
    with pytest.raises(LaunchError, match="PET_NPROC_PER_NODE=gpu, but no CUDA device"):
        processes_per_node("gpu")
    with pytest.raises(LaunchError, match="PET_NPROC_PER_NODE=2.5: expected a number, auto"):
        processes_per_node("2.5")


def test_device_choice(monkeypatch):
    assert select_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert select_device("auto", 1) == torch.device("cpu")
    with pytest.raises(ValueError, match="--device cuda: no CUDA device is visible"):
        select_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert select_device("auto", 3) == torch.device("cuda", 1)  # two processes per GPU


@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher",
    [["-m", "trainer"], ["-m", "torch.distributed.run", "-m", "trainer"]],
    ids=["python", "torchrun"],
)
def test_trainjob_nodes_train_together(launcher, packed_small, tmp_path, evaluate_saved):
    """Two TrainJob nodes, one process each, with only the env Trainer's torch plugin sets.

    As ``python -m trainer`` and as ``torchrun -m trainer`` (torchrun reads PET_* itself):
    the node of rank 0 alone prints, and its metric line is the saved model's score.
    """
    base = {key: value for key, value in os.environ.items() if key not in LAUNCHER_VARS}
    port = str(free_port())
    args = ["--epochs", "1", "--data-dir", str(packed_small), "--model-dir", str(tmp_path)]
    args += ["--train-limit", "1000", "--test-limit", "300", "--num-threads", "1"]
    nodes = [
        subprocess.Popen(
            [sys.executable, *launcher, *args],
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={
                **base,
                **trainjob_node_env(rank),
                "PET_MASTER_ADDR": "127.0.0.1",
                "PET_MASTER_PORT": port,
            },
        )
        for rank in range(2)
    ]
    (out0, err0), (out1, err1) = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], (err0, err1)
    assert "training on 2 process(es)" in out0
    assert "1 CPU thread(s) each" in out0  # --num-threads 1, what a 1-CPU pod gets
    assert "{metricName" not in out1 and "training on" not in out1
    reported = dict(parse_metric_lines(out0.splitlines()))
    accuracy, loss = evaluate_saved(tmp_path, packed_small, test_limit=300)
    assert reported["accuracy"] == round(accuracy, 4)
    assert reported["loss"] == pytest.approx(loss, abs=1.5e-4)
