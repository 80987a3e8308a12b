"""The Kubeflow Pipelines UI 2.15.0 in a real browser, over a real backend and real pods.

A user uploads the compiled YAML in the UI, starts runs there and reads the results there.
These tests do the same with Playwright driving Debian's Chromium, against the KFP UI built
from kubeflow/pipelines 2.15.0 ``frontend/`` (its node server with ML Metadata behind a
gRPC-web proxy) and the by-hand 2.15.0 backend of the ``kfp`` tier: every step runs in a real
pod on the tier's real nodes. Both are attached by hand (docs/development.md, "Kubeflow
Pipelines UI: attached by hand"), hence the ``kfp_ui`` marker; without them the tests fail,
they never skip. Each view is saved as a picture in build/kfp-ui-screenshots.

Upstream behaviour relied on, in kubeflow/pipelines at tag 2.15.0 (``frontend/src``):
- ``pages/NewPipelineVersion.tsx``: "Upload pipeline" takes a name and a file, then opens the
  pipeline's graph (``pages/PipelineDetailsV2.tsx``, one node per task by its name);
- ``pages/NewRunV2.tsx``: one field per pipeline parameter, labelled ``<name> - <type>``,
  holding its default; an experiment is chosen; "One-off" or "Recurring"
  (``components/Trigger.tsx``: "Run every" N minutes, "Maximum concurrent runs");
- ``pages/RunDetailsV2.tsx``: the run graph from ML Metadata; a task's "Logs" tab reads the
  pod's log from Kubernetes (``server/handlers/pod-logs.ts``);
- ``components/viewers/MetricsVisualizations.tsx``: system.Metrics as "Scalar Metrics",
  system.ClassificationMetrics as a confusion matrix, system.HTML and system.Markdown
  fetched through ``/artifacts/get`` and rendered;
- ``pages/CompareV2.tsx``: "Compare runs" puts the runs' scalar metrics side by side.
The backend's DAG executions (sub-pipelines, conditions) stay RUNNING in ML Metadata after a
run ends (kubeflow/pipelines#11979, open: ``launcher_v2.go`` updates one level of DAG only),
so a run's green is asserted on its steps, and its sub-DAGs' state is reported.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from cluster_helpers import wait_for
from conftest import remove_earlier_predictors
from kfp_helpers import (
    KFP_NAMESPACE,
    SLICE,
    STORAGE_CLASS,
    fmnist,
    run_pipeline,
    stop_run,
)
from kfp_ui import (
    CHROMIUM,
    UI_FILE,
    expand,
    graph_nodes,
    open_node,
    open_page,
    opened_id,
    screenshot,
    side_panel,
    steps,
    wait_for_text,
)

pytestmark = [pytest.mark.cluster, pytest.mark.kfp_ui, pytest.mark.timeout(1800)]
REPO = Path(__file__).resolve().parents[2]
PIPELINE_YAML = REPO / "build" / "pipelines" / "fashion-mnist.yaml"
CHANGED = {"lr": "0.003", "batch_size": "64"}  # the two parameters a user changes
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")  # fmt: skip


@pytest.fixture(scope="session")
def kfp_ui(kfp_host) -> str:
    """The KFP UI's address (build/cluster/kfp-ui), its API server ready; fails without."""
    if not UI_FILE.exists():
        pytest.fail(f"no Kubeflow Pipelines UI attached ({UI_FILE} is missing)", pytrace=False)
    address = UI_FILE.read_text().strip().rstrip("/")
    try:
        with urllib.request.urlopen(f"{address}/apis/v2beta1/healthz", timeout=10) as answer:
            health = json.load(answer)
    except OSError as error:
        pytest.fail(f"the KFP UI at {address} does not answer ({error})", pytrace=False)
    assert health["apiServerReady"], health
    return address


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium, headless, driven by Playwright (as root: no sandbox)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def compiled() -> dict:
    """build/pipelines/fashion-mnist.yaml as users compile it, for the real nodes' storage."""
    code, _, err = fmnist(
        "compile", "fashion-mnist", "--variant", "workspace",
        "--workspace-storage-class", STORAGE_CLASS,
    )  # fmt: skip
    assert code == 0, err
    pipeline_spec, *_platform_spec = yaml.safe_load_all(PIPELINE_YAML.read_text())
    return pipeline_spec


@pytest.fixture(scope="module")
def uploaded(kfp_ui, browser, compiled) -> str:
    """The pipeline uploaded through the UI's "Upload pipeline" page: its page's URL."""
    name = f"ui-fashion-mnist-{uuid.uuid4().hex[:6]}"
    page = open_page(browser, f"{kfp_ui}/#/pipelines")
    page.get_by_role("button", name="Upload pipeline").click()
    page.locator("#newPipelineName").fill(name)
    page.locator("#localPackageBtn").click()
    with page.expect_file_chooser() as chooser:
        page.get_by_test_id("uploadFileInput").get_by_role("button", name="Choose file").click()
    chooser.value.set_files(str(PIPELINE_YAML))
    page.locator("#createNewPipelineOrVersionBtn").click()
    page.wait_for_function("location.hash.includes('/pipelines/details/')")
    url = page.url
    page.context.close()
    return url


def tasks_of(spec: dict, dag: dict) -> dict[str, dict]:
    """A DAG's tasks by their names in the UI (taskInfo.name), each with its sub-DAG if any."""
    found = {}
    for task in dag["tasks"].values():
        component = spec["components"][task["componentRef"]["name"]]
        found[task["taskInfo"]["name"]] = component.get("dag")
    return found


def fill_parameters(page, params: dict) -> None:
    """Type each value into the parameter's field on the new-run page."""
    for name, value in params.items():
        field = page.locator(f'input[id^="{name} - "], textarea[id^="{name} - "]')
        if not field.count():
            field = page.get_by_label(re.compile(rf"^{re.escape(name)} - "))
        field.first.fill(str(value))


def choose_experiment(page, name: str = "Default") -> None:
    """Pick ``name`` in the new-run page's experiment chooser."""
    page.locator("#chooseExperimentBtn").click()
    page.get_by_role("dialog").get_by_text(name, exact=True).first.click()
    page.locator("#useExperimentBtn").click()


def start_run_from_ui(browser, uploaded: str, params: dict, recurring: bool = False):
    """The pipeline's "Create run" page, filled and started; returns the page after Start."""
    page = open_page(browser, uploaded)
    page.get_by_role("button", name="Create run").click()
    page.get_by_text("Run parameters").wait_for()
    choose_experiment(page)
    if recurring:  # components/Trigger.tsx: a Periodic trigger, "Run every 1 Minutes"
        page.get_by_label("Recurring").check()
        field = page.locator("label", has_text="Maximum concurrent runs").locator("xpath=..")
        field.locator("input").fill("1")
        every = page.locator("xpath=//span[contains(text(), 'Run every')]")
        every.get_by_role("button").click()  # the interval's select
        page.get_by_role("option", name="Minutes", exact=True).click()
    fill_parameters(page, params)
    page.locator("#startNewRunBtn").click()
    return page


@pytest.fixture(scope="module")
def ui_run(kfp_ui, browser, uploaded, kfp_client, custom, core) -> str:
    """A run created in the UI on a slice, with CHANGED; its id once it has ended."""
    remove_earlier_predictors(custom, core)
    page = start_run_from_ui(browser, uploaded, SLICE | CHANGED)
    run_id = opened_id(page, "runs/details")
    page.context.close()
    kfp_client.wait_for_run_completion(run_id, timeout=1200)
    return run_id


@pytest.fixture(scope="module")
def api_run(kfp_host, ui_run, custom, core) -> str:
    """A second run of the slice, submitted with `fmnist submit --wait` (after ``ui_run``)."""
    remove_earlier_predictors(custom, core)
    code, out, run_id = run_pipeline(kfp_host, "fashion-mnist", SLICE | {"lr": "0.005"})
    assert code == 0, out
    return run_id


def run_page(browser, kfp_ui: str, run_id: str):
    """The run's details page, its graph drawn."""
    page = open_page(browser, f"{kfp_ui}/#/runs/details/{run_id}")
    page.locator(".react-flow__node").first.wait_for()
    return page


def test_the_uploaded_pipeline_shows_every_step_and_its_parameters_with_defaults(
    kfp_ui, browser, uploaded, compiled
):
    page = open_page(browser, uploaded)
    root = tasks_of(compiled, compiled["root"]["dag"])
    assert set(steps(graph_nodes(page))) == set(root)
    screenshot(page, "kfp-ui-pipeline-graph")
    shown = {}
    for name, dag in root.items():  # one layer down: the sub-pipeline's steps
        if dag:
            expand(page, name)
            shown[name] = set(steps(graph_nodes(page)))
            assert shown[name] == set(tasks_of(compiled, dag)), name
            page.get_by_text("root", exact=True).click()
    assert shown == {"evaluate-and-deploy": {"evaluate", "accuracy-gate"}}
    page.get_by_role("button", name="Create run").click()
    page.get_by_text("Run parameters").wait_for()
    defaults = compiled["root"]["inputDefinitions"]["parameters"]
    for name, spec in defaults.items():
        field = page.get_by_label(re.compile(rf"^{re.escape(name)} - "))
        expected = spec.get("defaultValue", "")
        value = field.input_value()
        if isinstance(expected, float):
            assert float(value) == expected, name
        else:
            assert value == str(expected), (name, value, expected)
    page.get_by_text("Run parameters").evaluate("heading => heading.scrollIntoView()")
    screenshot(page, "kfp-ui-run-parameters")
    page.context.close()


def test_a_run_created_in_the_ui_succeeds_with_every_step_green(
    kfp_ui, browser, ui_run, kfp_client
):
    run = kfp_client.get_run(ui_run)
    assert run.state == "SUCCEEDED", run.state
    used = run.runtime_config.parameters
    assert {k: str(used[k]) for k in CHANGED} == CHANGED
    assert str(used["train_limit"]) == SLICE["train_limit"]
    page = run_page(browser, kfp_ui, ui_run)
    layers = {"root": steps(graph_nodes(page))}
    screenshot(page, "kfp-ui-run-graph")
    expand(page, "evaluate-and-deploy")
    layers["evaluate-and-deploy"] = steps(graph_nodes(page))
    expand(page, "accuracy-gate")
    layers["accuracy-gate"] = steps(graph_nodes(page))
    expand(page, "no-model-registry")
    layers["no-model-registry"] = steps(graph_nodes(page))
    screenshot(page, "kfp-ui-run-graph-deploy")
    containers = {
        "root": ["validate-serving", "validate-training", "pack-dataset", "train"],
        "evaluate-and-deploy": ["evaluate"],
        "no-model-registry": ["deploy"],
    }
    for layer, names in containers.items():
        assert {n: layers[layer][n] for n in names} == dict.fromkeys(names, "complete"), layers
    print(f"sub-DAG states as drawn (kubeflow/pipelines#11979): {json.dumps(layers)}")
    page.context.close()


def test_the_evaluate_artifacts_show_in_their_viewers(kfp_ui, browser, ui_run):
    page = run_page(browser, kfp_ui, ui_run)
    expand(page, "evaluate-and-deploy")
    open_node(page, "artifact.evaluate.metrics", "Visualization")
    table = wait_for_text(side_panel(page), r"accuracy\s+0\.\d+")
    accuracy = float(re.search(r"accuracy\s+(0\.\d+)", table)[1])
    loss = float(re.search(r"loss\s+(\d+\.\d+)", table)[1])
    assert 0.3 < accuracy <= 1 and loss > 0
    screenshot(page, "kfp-ui-scalar-metrics")
    open_node(page, "artifact.evaluate.confusion_matrix", "Visualization")
    matrix = wait_for_text(side_panel(page), "True label")
    for name in CLASS_NAMES:
        assert name in matrix, name
    cells = [int(c) for c in page.locator("table td").all_inner_texts() if c.strip().isdigit()]
    assert sum(cells) == int(SLICE["test_limit"]), cells
    screenshot(page, "kfp-ui-confusion-matrix")
    open_node(page, "artifact.evaluate.report_html", "Visualization")
    report = page.frame_locator("iframe").first
    assert report.locator("h1").inner_text() == "FashionMNIST model evaluation"
    assert f"{accuracy:.2%}" in report.locator("body").inner_text()
    screenshot(page, "kfp-ui-html-report")
    open_node(page, "artifact.evaluate.report", "Visualization")
    markdown = wait_for_text(side_panel(page), "Per-class accuracy")
    assert "batch_size=64" in markdown and "weight_decay=" in markdown, markdown
    screenshot(page, "kfp-ui-markdown-report")
    page.context.close()


def test_two_runs_compared_show_their_metrics_side_by_side(
    kfp_ui, browser, ui_run, api_run, kfp_client
):
    names = {kfp_client.get_run(r).display_name: r for r in (ui_run, api_run)}
    page = open_page(browser, f"{kfp_ui}/#/runs")
    for name in names:  # components/CustomTable.tsx: a row is a div with its checkbox
        row = f"//*[text()='{name}']/ancestor::div[.//input[@type='checkbox']][1]"
        page.locator(f"xpath={row}//input[@type='checkbox']").check()
    page.get_by_role("button", name="Compare runs").click()
    page.get_by_role("button", name="Scalar Metrics").click()
    shown = wait_for_text(page.locator("body"), r"accuracy[\s\S]*loss")
    for name in names:
        assert name in shown, name
    values = re.findall(r"accuracy\s+(0\.\d+)\s+(0\.\d+)", shown)
    assert values, shown
    # the picture: the metrics tabs at the top, the runs' metrics below them
    page.get_by_role("button", name="Scalar Metrics").evaluate("tab => tab.scrollIntoView()")
    screenshot(page, "kfp-ui-compare-runs")
    page.context.close()


@pytest.fixture(scope="module")
def failing_run(kfp_host, custom, core) -> str:
    """A diverging training (lr=1e6, SGD), submitted; its id once it has failed."""
    remove_earlier_predictors(custom, core)
    diverging = SLICE | {"lr": "1000000", "optimizer": "sgd", "momentum": "0"}
    code, out, run_id = run_pipeline(kfp_host, "fashion-mnist", diverging)
    assert code == 1, out
    return run_id


def test_a_failing_run_shows_the_train_step_red_with_diverged_in_its_logs(
    kfp_ui, browser, failing_run
):
    page = run_page(browser, kfp_ui, failing_run)
    root = steps(graph_nodes(page))
    assert root["train"] == "failed" and root["pack-dataset"] == "complete", root
    open_node(page, "task.train", "Logs")
    log = wait_for_text(side_panel(page), "diverged", timeout=90)
    assert re.search(r"--- log of fmnist-\w+-master-0", log), log[-2000:]
    screenshot(page, "kfp-ui-failed-train-logs")
    page.context.close()


def test_a_recurring_run_created_in_the_ui_starts_a_run(
    kfp_ui, browser, uploaded, kfp_client, custom, no_earlier_predictor
):
    page = start_run_from_ui(browser, uploaded, SLICE, recurring=True)
    recurring_id = opened_id(page, "recurringrun/details")
    trigger = wait_for_text(page.locator("body"), r"Max\. concurrent runs\s+1")
    assert re.search(r"Trigger\s+Every 1 minutes?", trigger, re.I), trigger
    screenshot(page, "kfp-ui-recurring-run")
    page.context.close()
    started = time.monotonic()
    fired = []
    try:
        (fired,) = wait_for(
            lambda: [
                r
                for r in kfp_client.list_runs(page_size=100, sort_by="created_at desc").runs or []
                if r.recurring_run_id == recurring_id
            ],
            240,
            "a run started by the recurring run",
        )
        print(f"recurring run {recurring_id} started run {fired.run_id} "
              f"after {time.monotonic() - started:.0f} s")  # fmt: skip
    finally:  # its runs' Workflows are owned by its ScheduledWorkflow: stop them first
        kfp_client.disable_recurring_run(recurring_id)
        if fired:
            stop_run(kfp_client, custom, fired.run_id, KFP_NAMESPACE)
        kfp_client.delete_recurring_run(recurring_id)


@pytest.fixture(scope="module")
def tune_run(kfp_host, custom, core) -> str:
    """The tune pipeline on a slice (two trials), submitted; its id once it has succeeded."""
    remove_earlier_predictors(custom, core)
    params = SLICE | {"lr_min": "0.001", "lr_max": "0.003", "epochs_min": "1",
                      "epochs_max": "1", "max_trials": "2", "parallel_trials": "1",
                      "workers": "1", "seed": "7", "sweep_timeout_seconds": "900"}  # fmt: skip
    params.pop("epochs")
    code, out, run_id = run_pipeline(kfp_host, "fashion-mnist-tune", params)
    assert code == 0, out
    return run_id


def test_the_tune_steps_best_trial_reads_in_the_ui(kfp_ui, browser, tune_run):
    page = run_page(browser, kfp_ui, tune_run)
    assert steps(graph_nodes(page))["tune"] == "complete"
    open_node(page, "task.tune", "Input/Output")
    shown = wait_for_text(side_panel(page), r"Output Parameters[\s\S]*\n\}")
    # A dict parameter is shown in a code viewer: its line numbers come first, then the JSON.
    outputs = re.search(
        r"Output Parameters\naccuracy\n(0\.\d+)\njob\n(?:\d+\n)*(\{.*?\n\})", shown, re.S
    )
    assert outputs, shown
    job = json.loads(outputs[2])
    assert 0.001 <= job["lr"] <= 0.003 and job["epochs"] == 1, job
    assert 0.1 < float(outputs[1]) <= 1, outputs[1]
    page.get_by_text("Output Parameters").evaluate("heading => heading.scrollIntoView()")
    screenshot(page, "kfp-ui-tune-best-trial")
    page.context.close()
