"""Why a job's pods have not started: the scheduler's reason, or a container's waiting reason."""

from __future__ import annotations

STARTING = {"ContainerCreating", "PodInitializing"}  # waiting reasons of a pod on its way


def not_started(pods) -> dict[str, str]:
    """Pod name -> why it is still Pending, for each Pending pod among ``pods``."""
    return {pod.metadata.name: _reason(pod) for pod in pods if pod.status.phase == "Pending"}


def _reason(pod) -> str:
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f"not scheduled ({condition.reason}): {condition.message}"
    statuses = (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
    for status in statuses:
        waiting = status.state.waiting if status.state else None
        if waiting and waiting.reason not in STARTING:
            return f"container {status.name} waiting ({waiting.reason}): {waiting.message or ''}"
    return "starting"


def summary(pods) -> str:
    """One line per Pending pod, or '' when every pod has started."""
    return "\n".join(f"{name}: {why}" for name, why in not_started(pods).items())
