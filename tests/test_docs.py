"""The guides say what the program does: their commands exist and their transcripts match.

Every ``fmnist ...`` line in a code block of README.md and docs/*.md must parse with the
real command line (a flag that was renamed or removed fails here). Every transcript (a
``$ fmnist ...`` line followed by what it prints) whose command needs no server is run
in this process, and what it prints must be what the guide shows, line for line. No code
block shows a path of the machine it was recorded on.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.main import build_parser, main

REPO = Path(__file__).resolve().parents[1]
GUIDES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?fmnist (?!run:|[a-z]+: )")
# An error transcript that needs a Kubeflow Pipelines server to answer (its release decides).
NEEDS_A_SERVER = {"fmnist submit --host http://localhost:8080"}
# An absolute path in a code block (not one of a URL, after ~, or after a <placeholder>).
ABSOLUTE_PATH = re.compile(r"""(?:^|(?<=[\s=(\[",]))/[\w.@-]+(?:/[\w.@<>*-]+)*""")
# The absolute paths a guide may show: places every user has, each named by the guides.
DOCUMENTED_PLACES = (
    "/usr/share/datasets/fashion-mnist",  # the default data folder (dataset-fashion-mnist)
    "/mnt/models",  # where KServe mounts the model
    "/kfp-workspace",  # KFP's run workspace in a step's pod
    "/models",  # the mount of operations.md's pod that lists a model PVC
)


@dataclass(frozen=True)
class Transcript:
    """A documented command and the lines the guide says it prints."""

    where: str
    command: str
    output: tuple[str, ...]


def code_blocks(path: Path) -> list[list[tuple[int, str]]]:
    """The guide's code blocks (indented or fenced; a blank line ends one), lines numbered."""
    blocks, block, fenced = [], [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif (fenced or line.startswith("    ")) and line.strip():
            block.append((number, line[4:] if line.startswith("    ") else line))
            continue
        if block:
            blocks.append(joined(block))
            block = []
    return blocks + ([joined(block)] if block else [])


def joined(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines with their backslash continuations joined."""
    result, pending, start = [], "", 0
    for number, line in lines:
        if not pending:
            start = number
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        result.append((start, pending))
        pending = ""
    return result


def argv_of(command: str) -> list[str]:
    """The arguments after ``fmnist``, without a trailing comment or pipe."""
    words = shlex.split(command.removeprefix("$ "), comments=True)
    if "|" in words:
        words = words[: words.index("|")]
    return words[1:]


def documented_commands() -> list[tuple[str, str]]:
    """Every ``fmnist`` command line in a guide's code blocks, with where it is."""
    found = []
    for path in GUIDES:
        for block in code_blocks(path):
            for number, line in block:
                if COMMAND.match(line) and "[--" not in line:  # `[--flag]`: a usage synopsis
                    found.append((f"{path.name}:{number}", line))
    return found


def transcripts() -> list[Transcript]:
    """Each ``$ fmnist`` line of a guide with the lines after it in its block, up to a ``$``."""
    found = []
    for path in GUIDES:
        for block in code_blocks(path):
            for index, (number, line) in enumerate(block):
                if not line.startswith("$ fmnist "):
                    continue
                output = []
                for _, text in block[index + 1 :]:
                    if text.startswith("$ "):
                        break
                    output.append(text.strip())
                found.append(Transcript(f"{path.name}:{number}", line[2:], tuple(output)))
    return found


def runnable_here(transcript: Transcript) -> bool:
    """Whether the transcript needs nothing but this process: no server, no training.

    That is every ``compile``, ``render``, ``sweep --render`` and ``--dry-run``, and every
    one-line error, which each command prints before it contacts anything.
    """
    argv = argv_of(transcript.command)
    offline = argv[0] in ("compile", "render") or "--render" in argv or "--dry-run" in argv
    error = len(transcript.output) == 1 and transcript.output[0].startswith("fmnist ")
    return (
        bool(transcript.output) and (offline or error) and transcript.command not in NEEDS_A_SERVER
    )


def test_the_guides_have_commands_and_transcripts():
    assert len(documented_commands()) >= 30
    assert len([t for t in transcripts() if runnable_here(t)]) >= 7


@pytest.mark.parametrize(("where", "line"), documented_commands(), ids=lambda v: str(v)[:60])
def test_every_documented_command_parses(where, line):
    try:
        build_parser().parse_args(argv_of(line))
    except SystemExit as exit:
        pytest.fail(f"{where}: `{line}` is not a valid command line (exit {exit.code})")


@pytest.mark.parametrize(
    "transcript",
    [t for t in transcripts() if runnable_here(t)],
    ids=lambda t: t.where,
)
def test_documented_transcripts_match_the_program(transcript, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # `fmnist compile` writes build/pipelines/ under the cwd
    monkeypatch.delenv("KUBECONFIG", raising=False)
    argv = argv_of(transcript.command)
    main(argv)
    out, err = capsys.readouterr()
    printed = [line.strip() for line in (out + err).splitlines() if line.strip()]
    grep = re.search(r"\| grep (\S+)$", transcript.command)
    if grep:
        printed = [line for line in printed if grep.group(1) in line]
    assert sorted(printed) == sorted(transcript.output), transcript.where


def machine_paths(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The absolute paths in ``lines`` that are no documented place: a recording machine's."""
    return [
        (number, path)
        for number, line in lines
        for path in ABSOLUTE_PATH.findall(line)
        if not any(path == place or path.startswith(f"{place}/") for place in DOCUMENTED_PLACES)
    ]


def test_a_path_of_the_recording_machine_is_caught():
    lines = [
        (1, "pack-dataset  packed 2000 training and 500 test images from /work/shared/data"),
        (2, "fmnist run: /tmp/docruns/run2 (all of kfp's output: log.txt there)"),
        (3, "fmnist run --data-dir /usr/share/datasets/fashion-mnist --run-dir runs/doc"),
        (4, "curl http://localhost:8080/v1/models/fashion-mnist:predict -d @v1.json"),
        (5, "kubectl --kubeconfig ~/karmada.config apply -k <fmnist-pipeline>/k8s/karmada"),
    ]
    assert machine_paths(lines) == [(1, "/work/shared/data"), (2, "/tmp/docruns/run2")]


@pytest.mark.parametrize("guide", GUIDES, ids=lambda path: path.name)
def test_code_blocks_show_paths_every_user_has(guide):
    found = [hit for block in code_blocks(guide) for hit in machine_paths(block)]
    assert found == [], (
        f"{guide.name}: a path of the machine this was recorded on (line, path): {found}; "
        "show $FASHION_MNIST_DIR, ./data/..., or a <placeholder> the text explains"
    )


def test_the_server_transcripts_named_here_are_in_the_guides():
    assert NEEDS_A_SERVER <= {t.command for t in transcripts()}
