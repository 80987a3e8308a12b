"""The lost-node watcher: a pod on a node that stopped answering, once rank 0 is quiet.

The node lifecycle controller marks a silent kubelet's node ``Ready=Unknown`` and its pods
not Ready (k8s.io/kubernetes v1.36.3 ``pkg/controller/nodelifecycle/
node_lifecycle_controller.go`` tryUpdateNodeHealth, ``pkg/controller/util/node/
controller_utils.go`` MarkPodsNotReady).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fake_kube import rank0_pod
from job_polls import Polls, running, suspended
from kubernetes.client import V1Node, V1NodeCondition, V1NodeStatus, V1PodCondition, V1PodSpec

from components.runtime.job_poll import GiveUp
from components.runtime.watchers.lost_nodes import (
    NODE_LOST_SECONDS,
    QUIET_SECONDS,
    LostNodes,
    NodeLost,
)


def pod_on(node: str, ready: bool):
    pod = rank0_pod(f"pod-on-{node}")
    pod.spec = V1PodSpec(containers=[], node_name=node)
    pod.status.conditions = [V1PodCondition(type="Ready", status=str(ready))]
    return pod


def node_out_of_ready_for(seconds: float) -> V1Node:
    since = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    ready = V1NodeCondition(
        type="Ready", status="Unknown", reason="NodeStatusUnknown", last_transition_time=since
    )
    return V1Node(status=V1NodeStatus(conditions=[ready]))


@pytest.fixture
def polls(fake_k8s) -> Polls:
    fake_k8s.core.pods = [[pod_on("node-a", True), pod_on("node-b", False)]]
    fake_k8s.core.nodes = {"node-b": node_out_of_ready_for(NODE_LOST_SECONDS + 5)}
    return Polls()


def test_a_pod_on_a_lost_node_gives_up_naming_it(polls):
    with pytest.raises(NodeLost) as lost:
        LostNodes().see(polls.poll(running(), quiet=QUIET_SECONDS + 1))
    assert isinstance(lost.value, GiveUp)
    assert "PyTorchJob team-a/fmnist-run-1 cannot go on: pod pod-on-node-b is on node node-b" in (
        str(lost.value)
    )


@pytest.mark.parametrize(
    ("conditions", "quiet"),
    [(running(), QUIET_SECONDS - 1), (running(), None), (suspended(), QUIET_SECONDS + 1)],
    ids=["log-moving", "log-not-followed-here", "suspended"],
)
def test_nodes_are_not_looked_at_while_rank_0_speaks_or_the_job_waits(
    polls, fake_k8s, conditions, quiet
):
    LostNodes().see(polls.poll(conditions, quiet=quiet))
    assert fake_k8s.core.selectors == []
