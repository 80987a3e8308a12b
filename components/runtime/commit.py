"""Which commit the code runs from: the git checkout's, else the one built into the image.

The images have no ``.git``: ``make images`` and the cluster tier pass the checkout's
commit as the build argument ``BUILD_ARG``, which images/*.Dockerfile set as ``ENV_VAR``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # a git checkout when run from one
GIT_TIMEOUT_SECONDS = 5
BUILD_ARG = "GIT_COMMIT"  # declared last in images/*.Dockerfile
ENV_VAR = "FMNIST_GIT_COMMIT"  # what the images set from it


def source_commit() -> str | None:
    """The commit of the checkout this code runs from, else the image's; None if neither says."""
    return checkout_commit(SOURCE_ROOT) or image_commit()


def image_commit() -> str | None:
    """The commit the image was built from (``ENV_VAR``); None when it was given none."""
    return os.environ.get(ENV_VAR, "").strip() or None


def checkout_commit(root: Path) -> str | None:
    """The git commit of ``root`` (``+ local changes`` if modified); None if not a checkout."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=True,
        )
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):  # no git, not a checkout
        return None
    return f"{commit} + local changes" if changed else commit
