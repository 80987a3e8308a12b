"""A job's pod on a node that stopped answering: when to give up, and what to say.

The node lifecycle controller marks a node whose kubelet stopped renewing its lease
``Ready=Unknown`` after ``--node-monitor-grace-period`` (50 s by default: k8s.io/kubernetes
v1.36.3 pkg/controller/nodelifecycle/config/v1alpha1/defaults.go) and its pods not Ready
(pkg/controller/util/node/controller_utils.go MarkPodsNotReady). The pods stay: taint-based
eviction deletes them after 300 s (DefaultTolerationSeconds), and with no kubelet to confirm
they stay Terminating until the node returns or an admin marks it out of service, when
PodGC force-deletes them (pkg/controller/podgc/gc_controller.go gcTerminating). A
PyTorchJob's pods have fixed names, so the Training Operator cannot replace them before
(training-operator v1.9.4 pkg/controller.v1/common/pod.go). Rather than wait for its
timeout, the step gives up ``NODE_LOST_SECONDS`` after the node left Ready, naming it.

The nodes are looked at once rank 0's log has been quiet for QUIET_SECONDS: a job that
prints is not held up by a lost node, and a lost node's kubelet serves no log.
"""

from __future__ import annotations

from datetime import datetime, timezone

from kubernetes.client.exceptions import ApiException

from components.runtime.job_poll import GiveUp, JobPoll
from components.runtime.kube import KubeClient

NODE_LOST_SECONDS = 120  # a kubelet restart or a short partition is over well before
QUIET_SECONDS = 30  # rank 0's log this long without a new line: look at the pods' nodes
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


class NodeLost(GiveUp):
    """A pod of the job is on a node that has not been Ready for NODE_LOST_SECONDS."""


class LostNodes:
    """Gives up on a job with a pod on a node that stopped answering."""

    def see(self, poll: JobPoll) -> None:
        """Once rank 0 is quiet, raise NodeLost for a pod on a node lost too long."""
        kube, quiet = poll.place.kube, poll.quiet_seconds
        if poll.suspended or kube is None or quiet is None or quiet <= QUIET_SECONDS:
            return
        try:
            check(kube, poll.pods())
        except NodeLost as lost:
            raise NodeLost(f"{poll.what} cannot go on: {lost}") from None


def _not_ready(pod) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status != "True" for c in conditions)


def check(kube: KubeClient, pods, now: datetime | None = None) -> None:
    """Raise NodeLost for the first pod whose node has been out of Ready too long.

    Only the nodes of pods that are not Ready are read. A step that may not read nodes
    (403) checks nothing: the job's timeout still bounds the wait.
    """
    now = now or datetime.now(timezone.utc)
    for pod in pods:
        node_name = pod.spec.node_name if pod.spec else None
        if not (node_name and _not_ready(pod)):
            continue
        try:
            node = kube.core_api.read_node(node_name)
        except ApiException as error:
            if error.status in (403, 404):
                continue
            raise
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
        if ready is None or ready.status == "True" or ready.last_transition_time is None:
            continue
        seconds = (now - ready.last_transition_time).total_seconds()
        if seconds > NODE_LOST_SECONDS:
            raise NodeLost(
                f"pod {pod.metadata.name} is on node {node_name}, which has not been Ready for "
                f"{seconds:.0f} s (Ready={ready.status}: {ready.message or ready.reason}); its "
                "pods cannot be replaced until the node returns or an admin marks it out of "
                f"service (kubectl taint node {node_name} {OUT_OF_SERVICE})"
            )
