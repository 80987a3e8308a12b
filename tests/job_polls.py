"""JobPolls of a PyTorchJob over the fake Kubernetes API, as the wait hands them to watchers."""

from __future__ import annotations

from components.runtime.job_poll import Job, JobPoll, Place
from components.runtime.kube import KubeClient
from components.specs.kinds import PYTORCHJOB_KIND

NAMESPACE, NAME = "team-a", "fmnist-run-1"


def suspended(message: str = "job suspended") -> list[dict]:
    """The conditions of a job Kueue holds."""
    return [{"type": "Suspended", "status": "True", "reason": "Suspended", "message": message}]


def running() -> list[dict]:
    return [{"type": "Running", "status": "True"}]


class Polls:
    """Makes one poll after another of the same job; records what watchers say and move."""

    def __init__(self):
        self.kube = KubeClient()
        self.job = Job(self.kube, PYTORCHJOB_KIND, NAMESPACE, NAME)
        self.said: list[str] = []
        self.place = Place(kube=self.kube)

    def poll(self, conditions: list[dict], quiet: float | None = 0.0, spec=None) -> JobPoll:
        found = {
            "metadata": {"name": NAME, "uid": "uid-1"},
            "spec": spec or {},
            "status": {"conditions": conditions},
        }
        return JobPoll(self.job, found, self.place, quiet, self.said.append, self._move)

    def _move(self, place: Place) -> None:
        self.place = place
