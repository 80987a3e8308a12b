"""Which commit the report names: the checkout's, else the one built into the image."""

import subprocess

import pytest

from components.runtime import commit
from components.runtime.commit import ENV_VAR, checkout_commit, source_commit
from components.runtime.evaluation import run_facts
from components.runtime.gate import Champion, decide
from components.runtime.report import UNKNOWN_COMMIT, run_rows

BAKED = "0123456789ab"  # as `make images` passes it


@pytest.fixture
def checkout(tmp_path):
    """A git checkout with one commit; its short hash."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "code.py").write_text("A = 1\n")

    def git(*args):
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    git("init", "-q")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "one")
    return root, git("rev-parse", "--short=12", "HEAD")


def test_a_checkout_names_its_own_commit_before_the_images(checkout, monkeypatch):
    root, head = checkout
    monkeypatch.setattr(commit, "SOURCE_ROOT", root)
    monkeypatch.setenv(ENV_VAR, BAKED)
    assert source_commit() == head
    (root / "code.py").write_text("A = 2\n")
    assert source_commit() == f"{head} + local changes"


def test_without_a_checkout_the_image_names_the_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(commit, "SOURCE_ROOT", tmp_path)  # an installed copy: no .git
    monkeypatch.setenv(ENV_VAR, f" {BAKED}\n")
    assert checkout_commit(tmp_path) is None
    assert source_commit() == BAKED


@pytest.mark.parametrize("baked", [None, "", "  "])
def test_with_neither_the_commit_is_unknown(tmp_path, monkeypatch, baked):
    """An image built without the argument sets the variable empty."""
    monkeypatch.setattr(commit, "SOURCE_ROOT", tmp_path)
    if baked is None:
        monkeypatch.delenv(ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(ENV_VAR, baked)
    assert source_commit() is None


def test_the_reports_run_names_the_images_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(commit, "SOURCE_ROOT", tmp_path)
    (tmp_path / "manifest.json").write_text("{}")
    decision = decide(0.9, 0.5, 0.0, Champion())
    monkeypatch.setenv(ENV_VAR, BAKED)
    facts = run_facts("/m", str(tmp_path), Champion(), decision)
    assert ("commit", BAKED) in run_rows(facts, {})
    monkeypatch.delenv(ENV_VAR)
    facts = run_facts("/m", str(tmp_path), Champion(), decision)
    assert ("commit", UNKNOWN_COMMIT) in run_rows(facts, {})
