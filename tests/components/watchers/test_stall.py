"""The stall watcher: rank 0 quiet for STALL_SECONDS is said once, with the pods not started.

What the pods say is the scheduler's own words (k8s.io/kubernetes v1.36.3
``pkg/scheduler/schedule_one.go``: ``PodScheduled=False``, reason ``Unschedulable``).
"""

from __future__ import annotations

import pytest
from fake_kube import rank0_pod
from job_polls import Polls, running, suspended
from kubernetes.client import V1PodCondition

from components.runtime.watchers.stall import STALL_SECONDS, Stall

QUIET = STALL_SECONDS + 1


@pytest.fixture
def polls(fake_k8s) -> Polls:
    waiting = rank0_pod("worker-0", phase="Pending")
    waiting.status.container_statuses = None
    waiting.status.conditions = [
        V1PodCondition(
            type="PodScheduled", status="False", reason="Unschedulable", message="no cpu"
        )
    ]
    fake_k8s.core.pods = [[rank0_pod("master-0"), waiting]]
    return Polls()


def test_a_quiet_rank_0_is_said_once_with_the_pods_not_started(polls):
    watcher = Stall()
    watcher.see(polls.poll(running(), quiet=QUIET))
    watcher.see(polls.poll(running(), quiet=QUIET + 10))
    assert polls.said == [
        f"PyTorchJob team-a/fmnist-run-1: no new line from rank 0 for {QUIET} s; still "
        "waiting (pods not started: worker-0: not scheduled (Unschedulable): no cpu)"
    ]


def test_it_is_said_again_after_rank_0_spoke(polls):
    watcher = Stall()
    for quiet in (QUIET, 0.0, QUIET):
        watcher.see(polls.poll(running(), quiet=quiet))
    assert len(polls.said) == 2


@pytest.mark.parametrize(
    ("conditions", "quiet"), [(running(), QUIET - 2), (running(), None), (suspended(), QUIET)]
)
def test_nothing_is_said_while_rank_0_speaks_or_the_job_waits(polls, conditions, quiet):
    Stall().see(polls.poll(conditions, quiet=quiet))
    assert polls.said == []
