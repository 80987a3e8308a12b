"""The Kubeflow Pipelines UI in a real browser: Playwright (PyPI) driving Debian's Chromium.

What the tests read is what the UI draws, in kubeflow/pipelines 2.15.0 ``frontend/src``:
- ``components/graph/ExecutionNode.tsx`` and ``SubDagNode.tsx``: a graph node per task
  (``data-id="task.<name>"``), per artifact (``artifact.<task>.<name>``), its state as an
  icon (COMPLETE: a check mark with the class ``bla``; FAILED: ``text-mui-red-600``;
  RUNNING: the refresh icon), a sub-DAG expanded by its round button;
- ``pages/RunDetailsV2.tsx`` and ``components/tabs/RuntimeNodeDetailsV2.tsx``: the side panel
  of a node, with the tabs "Input/Output", "Task Details", "Logs" (a task) or "Artifact Info",
  "Visualization" (an artifact).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

BUILD = Path(__file__).resolve().parents[2] / "build"
UI_FILE = BUILD / "cluster" / "kfp-ui"  # the UI's address, written when attached by hand
SCREENSHOTS = BUILD / "kfp-ui-screenshots"  # one picture per view; docs/images takes some
CHROMIUM = os.environ.get("FMNIST_CHROMIUM", "/usr/bin/chromium")  # Debian's chromium
VIEWPORT = {"width": 1400, "height": 1000}

# Each node of the graph's current layer: its data-id, its label, its state from the icon.
_NODES_JS = """
nodes => nodes.map(node => {
  const icons = node.querySelectorAll('svg');
  const icon = icons.length > 1 ? icons[icons.length - 1] : null;
  const classes = icon ? (icon.getAttribute('class') || '') : '';
  const shape = icon ? icon.querySelector('path[d]:not([fill=none])') : null;
  const path = shape ? shape.getAttribute('d') : '';
  let state = 'none';
  if (classes.includes('bla')) state = 'complete';
  else if (classes.includes('text-mui-red-600')) state = 'failed';
  else if (path.startsWith('M17.65')) state = 'running';
  else if (classes.includes('text-mui-grey-600')) state = 'canceled';
  return [node.getAttribute('data-id'), node.innerText.trim(), state];
})
"""


def open_page(browser, url: str):
    """A page of its own (a fresh context: no state left by another test) at ``url``."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(url)
    return page


def screenshot(page, name: str) -> Path:
    """Save what the page shows as ``<name>.png`` in SCREENSHOTS."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def graph_nodes(page, timeout: float = 30) -> dict[str, tuple[str, str]]:
    """The current graph layer's nodes: data-id -> (label, state)."""
    page.locator(".react-flow__node").first.wait_for(timeout=timeout * 1000)
    page.wait_for_timeout(1500)  # the layer's states come from ML Metadata after the layout
    found = page.locator(".react-flow__node").evaluate_all(_NODES_JS)
    return {node_id: (label, state) for node_id, label, state in found}


def steps(nodes: dict[str, tuple[str, str]]) -> dict[str, str]:
    """The tasks (steps and sub-DAGs) of a layer: label -> state."""
    return {
        label: state for node_id, (label, state) in nodes.items() if node_id.startswith("task.")
    }


def expand(page, label: str) -> None:
    """Open the sub-DAG ``label`` (its round button) and wait for its layer.

    The "Layers" breadcrumb names a layer by its task key (a condition's is ``condition-N``,
    not its display name), so the wait is for one more layer there.
    """
    layers = page.get_by_text("Layers").locator("xpath=..")
    depth = len(layers.inner_text().split())
    page.locator(f'.react-flow__node-SUB_DAG:has(button[title="{label}"]) .rounded-full').click()
    page.wait_for_function(
        "depth => document.evaluate(\"//*[text()='Layers']/..\", document, null, 9, null)"
        ".singleNodeValue.innerText.split(/\\s+/).filter(Boolean).length > depth",
        arg=depth,
    )
    page.locator(".react-flow__node").first.wait_for()


def open_node(page, node_id: str, tab: str) -> None:
    """Click a node of the graph and show ``tab`` of its side panel (closing an open one,
    which covers the graph)."""
    close = page.get_by_role("button", name="close")
    if close.count():
        close.click()
    page.locator(f'.react-flow__node[data-id="{node_id}"]').click()
    page.get_by_role("button", name=tab, exact=True).click()


def side_panel(page):
    """The open side panel of a node (``components/SidePanel.tsx``: its close button's box)."""
    return page.get_by_role("button", name="close").locator("xpath=../..")


def wait_for_text(locator, pattern: str, timeout: float = 60) -> str:
    """The locator's text once it matches ``pattern`` (the UI fills panels as answers come)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = locator.inner_text() if locator.count() else ""
        if re.search(pattern, text):
            return text
        time.sleep(1)
    raise AssertionError(f"no {pattern!r} within {timeout:.0f} s in:\n{text[-3000:]}")


def opened_id(page, route: str, timeout: float = 60) -> str:
    """The id of what the UI opened next at ``route``: ``<id>`` in ``#/<route>/<id>``.

    After "Start" the UI opens ``runs/details`` or ``recurringrun/details``.
    """
    page.wait_for_function(f"location.hash.includes('/{route}/')", timeout=timeout * 1000)
    return page.evaluate("location.hash").rsplit("/", 1)[1]
