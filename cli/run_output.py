"""What ``fmnist run`` shows while kfp.local runs the pipeline, and what goes to ``log.txt``.

kfp.local writes everything to stdout: its log records (a task starts, finishes, and the
dump of its outputs), and each step's output indented by four spaces. :class:`RunOutput`
takes that stream. All of it goes to ``log.txt``, without colour codes; the terminal gets
one line per step starting and finishing (with its time), the steps' own lines (the
training's epoch lines with the elapsed time and an estimate of the rest), and nothing of
kfp's dumps, executor chatter or tracebacks. A failed step's error is kept for the summary.
"""

from __future__ import annotations

import io
import re
import time

from trainer.metrics import parse_metric_lines

ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")
LOG_RECORD = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} - [A-Z]+ - (.*)$")
TASK_STARTED = re.compile(r"^Executing task '([\w.-]+)'$")
TASK_FINISHED = re.compile(r"^Task '([\w.-]+)' finished with status (\w+)$")
TASK_OUTPUTS = re.compile(r"^Task '([\w.-]+)' (outputs:|has no outputs)")
STEP_INDENT = "    "  # kfp.local's indent of a step's own output
RESUMED = re.compile(r"^resumed from epoch (\d+)")
TORCHRUN_THREADS_NOTE = "Setting OMP_NUM_THREADS environment variable"  # in a *** banner
TRAINING_STARTED = "training on "  # the trainer's first line, once its data is loaded
ERROR_LINES = 4  # lines of a failed step's exception shown in the summary
STEP_WIDTH = 18  # the step-name column


def shown_name(task: str) -> str:
    """A task as its step: KFP names a second task of one component ``deploy-2``."""
    return re.sub(r"-\d+$", "", task)


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes."""
    return ANSI_CODE.sub("", text)


class RunOutput(io.TextIOBase):
    """kfp.local's stdout: everything to ``log``, our steps' progress to ``console``."""

    def __init__(self, log, console, epochs: int, clock=time.monotonic):
        self.log, self.console, self.epochs, self.clock = log, console, epochs, clock
        self.pending = ""
        self.step, self.section, self.started = "", "", 0.0
        self.failed_step, self.error = "", []
        self.in_dump = self.in_traceback = False
        self.training_started, self.epochs_before = 0.0, 0

    def write(self, text: str) -> int:
        """Take kfp's output; handle every complete line."""
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self._line(strip_ansi(line))
        return len(text)

    def flush(self) -> None:
        """Flush the log and the console."""
        self.log.flush()
        self.console.flush()

    def _line(self, line: str) -> None:
        self.log.write(line + "\n")
        record = LOG_RECORD.match(line)
        if record:
            self._record(record.group(1))
        elif self.section == "logs" and line.startswith(STEP_INDENT):
            self._step_line(line[len(STEP_INDENT) :])

    def _record(self, message: str) -> None:
        if started := TASK_STARTED.match(message):
            self.step, self.section, self.started = shown_name(started.group(1)), "", self.clock()
            self.in_dump = self.in_traceback = False
            self._show("started")
        elif message.startswith("Streamed logs:"):
            self.section = "logs"
        elif TASK_OUTPUTS.match(message):
            self.section = "outputs"
        elif finished := TASK_FINISHED.match(message):
            self.section = ""
            seconds = self.clock() - self.started
            if finished.group(2) == "SUCCESS":
                self._show(f"done in {seconds:.1f} s")
            else:
                self.failed_step = self.step
                self._show(f"failed after {seconds:.1f} s")

    def _step_line(self, text: str) -> None:
        if self.in_dump:  # the executor's input dump: indented JSON, ends at its brace
            self.in_dump = text.rstrip() != "}" and "[KFP Executor" not in text
            return
        if "[KFP Executor" in text:
            self.in_dump = text.rstrip().endswith("Got executor_input:")
            return
        if text.startswith("Traceback (most recent call last):"):
            self.in_traceback, self.error = True, []
            return
        if self.in_traceback:
            if self.error or not text.startswith(" "):  # frames are indented; then the error
                self.error.append(text)
            return
        if text.strip() and not self._progress(text):
            self._show(text)

    def _progress(self, text: str) -> bool:
        """Handle the lines shown in another form or not at all; True if ``text`` was one."""
        metrics = dict(parse_metric_lines([text]))
        if {"accuracy", "loss"} <= metrics.keys():
            if self.step == "train":
                self._epoch_line(metrics)
            return True  # the evaluate step says it in words
        if text.startswith(TRAINING_STARTED):
            self.training_started = self.clock()
        elif resumed := RESUMED.match(text):
            self.epochs_before = int(resumed.group(1))
        torchrun = text.startswith("running ") and "torch.distributed.run" in text
        return torchrun or text.strip("* ") == "" or text.startswith(TORCHRUN_THREADS_NOTE)

    def _epoch_line(self, metrics: dict[str, float]) -> None:
        self.epochs_before += 1
        done = self.epochs_before
        elapsed = self.clock() - (self.training_started or self.started)
        timing = f"{elapsed:.0f} s"
        if done < self.epochs:
            timing += f", about {elapsed / done * (self.epochs - done):.0f} s left"
        self._show(
            f"epoch {done}/{self.epochs}: test accuracy {metrics['accuracy']:.4f}, "
            f"loss {metrics['loss']:.4f} ({timing})"
        )

    def _show(self, text: str) -> None:
        self.console.write(f"{self.step:<{STEP_WIDTH}} {text}\n")
        self.console.flush()

    def failure(self) -> str:
        """The failed step's error in a few lines (its exception), or '' when there is none."""
        lines = [line for line in self.error if line.strip()]
        if not lines:
            return ""
        name, _, message = lines[0].partition(": ")
        lines[0] = f"{name.rsplit('.', 1)[-1]}: {message}" if message else name
        if len(lines) > ERROR_LINES:
            lines = [*lines[:ERROR_LINES], "..."]
        return "\n".join(lines)
