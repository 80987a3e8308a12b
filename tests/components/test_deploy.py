"""The deploy step through ``.python_func``, with the Kubernetes API faked at the client boundary.

``fake_k8s`` (tests/conftest.py) stands in for ``CustomObjectsApi``: these tests
check the exact InferenceService sent, create-or-update, waiting for Ready of the current
generation, and failures that name the service's conditions. The model store is a
temporary directory in place of the PVC mount.
"""

from dataclasses import asdict
from pathlib import Path

import pytest
from kfp import dsl

import components.kserve_deploy as kserve_deploy
from components.deploy import deploy
from components.kserve_deploy import isvc_ready
from components.params import DEFAULTS

DEPLOY_PARAMS = {
    name: value for name, value in asdict(DEFAULTS).items() if name in deploy.component_spec.inputs
}
URL = "http://fashion-mnist.team-a.example.com"


def ready(generation: int, url: str = URL) -> dict:
    return {
        "observedGeneration": generation,
        "url": url,
        "conditions": [
            {"type": "PredictorReady", "status": "True"},
            {"type": "Ready", "status": "True"},
        ],
    }


@pytest.fixture
def step(tmp_path, monkeypatch):
    """Call the deploy step as the KFP launcher would on a cluster."""
    monkeypatch.setattr(kserve_deploy, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(kserve_deploy, "MODEL_STORE_MOUNT", str(tmp_path / "store"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.pt").write_bytes(b"weights")
    (model / "model.json").write_text("{}")

    def call(**changes):
        arguments = {**DEPLOY_PARAMS, "namespace": "team-a", **changes}
        return deploy.python_func(
            model=dsl.Model(uri=str(model)),
            dataset=dsl.Dataset(uri=str(tmp_path / "unused")),
            run_id="run-42",
            **arguments,
        )

    return call


def test_creates_the_inferenceservice_and_returns_its_url(step, fake_k8s, tmp_path, validate_crd):
    fake_k8s.custom.statuses["inferenceservices"] = [{"conditions": []}, ready(1)]
    assert step(serving_gpus=1, deployment_mode="Knative", serving_min_replicas=0) == URL

    (isvc,) = fake_k8s.custom.created("inferenceservices")
    validate_crd(isvc)
    assert isvc["metadata"] == {
        "name": "fashion-mnist",
        "namespace": "team-a",
        "annotations": {"serving.kserve.io/deploymentMode": "Knative"},
    }
    predictor = isvc["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (0, 1)
    container = predictor["containers"][0]
    assert container["image"] == DEFAULTS.serving_image
    assert container["env"] == [
        {"name": "STORAGE_URI", "value": "pvc://fmnist-models/fashion-mnist/run-42"}
    ]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    published = tmp_path / "store" / "fashion-mnist" / "run-42"
    assert (published / "model.pt").read_bytes() == b"weights"
    assert fake_k8s.custom.verbs() == [
        ("create", "inferenceservices"),
        ("get", "inferenceservices"),
        ("get", "inferenceservices"),
    ]


def test_updates_an_existing_service_and_waits_for_the_new_generation(step, fake_k8s):
    existing = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "fashion-mnist", "namespace": "team-a"},
        "spec": {},
    }
    fake_k8s.custom._store("inferenceservices", "team-a", existing)
    # Reads go on showing the old generation as Ready for a while: not good enough.
    fake_k8s.custom.statuses["inferenceservices"] = [ready(1), ready(1), ready(2)]
    assert step() == URL
    # create (409), get its resourceVersion, replace; then wait past the stale Ready.
    assert [verb for verb, _ in fake_k8s.custom.verbs()] == [
        "create",
        "get",
        "replace",
        "get",
        "get",
    ]
    replaced = fake_k8s.custom.calls[2][5]
    assert replaced["metadata"]["resourceVersion"] == "1"
    assert replaced["spec"]["predictor"]["containers"][0]["env"][0]["value"].endswith("/run-42")


def test_a_model_that_fails_to_load_fails_the_step_with_the_conditions(step, fake_k8s):
    fake_k8s.custom.statuses["inferenceservices"] = [
        {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "ContainerCrash",
                    "message": "predictor exited: model.pt missing",
                }
            ],
            "modelStatus": {
                "states": {"targetModelState": "FailedToLoad"},
                "lastFailureInfo": {"reason": "ModelLoadFailed", "message": "no model.json"},
            },
        }
    ]
    with pytest.raises(RuntimeError) as error:
        step()
    message = str(error.value)
    assert "team-a/fashion-mnist: model failed to load: ModelLoadFailed: no model.json" in message
    assert "Ready=False (ContainerCrash: predictor exited: model.pt missing)" in message


def test_a_service_that_never_gets_ready_times_out(step, fake_k8s):
    fake_k8s.custom.statuses["inferenceservices"] = [
        {
            "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "False", "reason": "RevisionMissing"}],
        }
    ]
    with pytest.raises(
        RuntimeError,
        match=r"not Ready within 1 s\.\nConditions:\nReady=False "
        r"\(RevisionMissing\)",
    ):
        step(serving_timeout_seconds=1)


def test_bad_parameters_fail_before_any_api_call(step, fake_k8s):
    with pytest.raises(ValueError, match="serving_min_replicas must be an integer >= 1"):
        step(serving_min_replicas=0)
    assert fake_k8s.custom.calls == []


def test_local_predictor_that_cannot_load_fails_with_its_output(tmp_path):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(RuntimeError, match="the predictor exited with code 1") as error:
        deploy.python_func(
            model=dsl.Model(uri=str(empty)),
            dataset=dsl.Dataset(uri=str(tmp_path / "data")),
            run_id="r",
            **{**DEPLOY_PARAMS, "backend": "local"},
        )
    assert "no model.pt" in str(error.value)
    assert Path(empty).is_dir()


@pytest.mark.parametrize(
    ("status", "is_ready"),
    [
        (ready(2), True),
        (ready(1), False),  # a Ready left over from the previous spec
        ({"conditions": ready(2)["conditions"]}, True),  # a controller that omits the field
        ({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False"}]}, False),
        ({}, False),
    ],
)
def test_ready_means_ready_for_the_current_generation(status, is_ready):
    assert isvc_ready({"metadata": {"generation": 2}, "status": status}) is is_ready
