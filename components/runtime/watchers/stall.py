"""Rank 0 has printed nothing for a long time: say so once, with the pods that never started.

A DDP job whose ranks cannot all reach each other (a worker not scheduled, a NetworkPolicy
in the way, a rendezvous port taken) sits at the rendezvous with a quiet log until torch's
timeout (30 minutes for the process group) or the step's own. The step goes on waiting;
this says why the log stopped, so nobody waits half an hour to find out.
"""

from __future__ import annotations

from components.runtime import pod_status
from components.runtime.job_poll import JobPoll

STALL_SECONDS = 300  # rank 0 quiet this long, while the job runs: say so


class Stall:
    """Says once per quiet stretch that rank 0's log stopped, and which pods never started."""

    def __init__(self):
        self.said = False

    def see(self, poll: JobPoll) -> None:
        """Say so when rank 0 has been quiet for STALL_SECONDS; again after it spoke."""
        quiet = poll.quiet_seconds
        if poll.suspended or quiet is None or quiet <= STALL_SECONDS:
            self.said = False
            return
        if self.said:
            return
        self.said = True
        pending = pod_status.summary(poll.pods()).replace("\n", "; ")
        poll.say(
            f"{poll.what}: no new line from rank 0 for {quiet:.0f} s; still waiting"
            + (f" (pods not started: {pending})" if pending else "")
        )
