"""Copy the log of a job's rank-0 pod into the step's own log, across polls and restarts."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from components.runtime.kube import KubeClient
from components.runtime.torchrun_log import TrainerTail

LOG_TAIL_LINES = 40


class LogFollower:
    """Prints the lines of one container that appeared since the last poll.

    A new pod (another uid) or a restarted container starts over, with a header line.
    The last LOG_TAIL_LINES lines before torchrun's report on a failed worker are kept for
    error messages (torchrun_log.py).
    """

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        selector: str,
        container: str,
        echo: Callable[[str], None] = print,
    ):
        self.kube, self.namespace, self.echo = kube, namespace, echo
        self.selector, self.container = selector, container
        self.current, self.printed = None, 0
        self.tail = TrainerTail(LOG_TAIL_LINES)

    def poll(self) -> None:
        """Print the new lines; a pod deleted between listing and reading is skipped."""
        pods = self.kube.list_pods(self.namespace, self.selector)
        running = [pod for pod in pods if pod.status.phase != "Pending"]
        if not running:
            return
        pod = running[0]
        current = (pod.metadata.uid, self._restarts(pod))
        try:
            text = self.kube.pod_log(self.namespace, pod.metadata.name, self.container)
        except ApiException as exc:
            if exc.status in (400, 404):  # gone, or its container not started yet
                return
            raise
        if current != self.current:
            self.current, self.printed = current, 0
            self.tail.restart()
            self.echo(f"--- log of {pod.metadata.name} (restart {current[1]}) ---")
        lines = text.splitlines()
        for line in lines[self.printed :]:
            self.echo(line)
            self.tail.add(line)
        self.printed = len(lines)

    def tail_text(self) -> str:
        """The trainer's last lines seen, or ``(none)``."""
        return "\n".join(self.tail.lines) or "(none)"

    def reason(self) -> str:
        """The trainer's error line among those seen; "" when none (a container killed, say)."""
        return self.tail.error()

    def _restarts(self, pod) -> int:
        statuses = pod.status.container_statuses or []
        return sum(item.restart_count or 0 for item in statuses if item.name == self.container)
