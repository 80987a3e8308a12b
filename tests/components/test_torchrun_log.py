"""The trainer's tail as torchrun passes it on: torchrun's own lines after a failure stay out."""

from components.runtime.torchrun_log import TrainerTail

API = "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py"
# What torchrun 2.9 prints once one of two workers failed while the other still ran.
STOPS_THE_OTHER = (
    f"W1207 17:24:27.237000 1261 {API}:1028] Sending process 1278 closing signal SIGTERM"
)
FAILED = f"E1207 17:24:27.301000 1261 {API}:1002] failed (exitcode: 2) local_rank: 1 (pid: 1279)"
ERROR = "trainer: error: training diverged in epoch 2 with --lr 0.05"


def tail_of(*lines: str) -> TrainerTail:
    tail = TrainerTail(40)
    for line in lines:
        tail.add(line)
    return tail


def test_the_tail_stops_where_torchrun_stops_the_other_workers():
    tail = tail_of("epoch 1", ERROR, STOPS_THE_OTHER, FAILED, "Traceback (most recent call last):")
    assert list(tail.lines) == ["epoch 1", ERROR]
    assert tail.reason() == ERROR


def test_a_restarted_run_is_kept_and_gives_the_reason():
    tail = tail_of(ERROR, FAILED, "ChildFailedError:")
    tail.restart()
    tail.add("[rank0]: RuntimeError: NCCL timeout")
    assert list(tail.lines) == [ERROR, "[rank0]: RuntimeError: NCCL timeout"]
    assert tail.reason() == "RuntimeError: NCCL timeout"
    tail.restart()  # a run that has said nothing yet: the earlier ones say why
    assert tail.reason() == ERROR


def test_a_run_that_only_made_progress_has_no_error_line():
    """A container killed for its memory says nothing: the reason falls back to its last line,
    the error line (the cluster step's headline) is empty."""
    tail = tail_of("epoch 1 [1024/60000] loss 0.61")
    assert (tail.reason(), tail.error()) == ("epoch 1 [1024/60000] loss 0.61", "")
    assert tail_of(ERROR, "epoch 2").error() == ERROR
