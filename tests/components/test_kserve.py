"""The deploy step on a cluster, against a fake Kubernetes API (the ``kubernetes`` client only).

What KServe does that the step relies on, read in its source:
- mode names: RawDeployment/Serverless up to 0.15, Standard/Knative from 0.16 (kserve
  ``pkg/constants/constants.go`` at v0.15.2 and v0.16.0); the webhook rejects an update
  whose mode annotation differs from ``status.deploymentMode`` (``pkg/apis/serving/v1beta1/
  inference_service_validation.go``, ``validateDeploymentMode``, v0.15.2 to v0.20.0);
- in Standard mode Ready stays True while the old pod serves, and ``observedGeneration``
  is the Deployment's (v0.15.2 ``pkg/apis/serving/v1beta1/inference_service_status.go``,
  ``PropagateRawStatus``), so the step waits for the Deployment with the new STORAGE_URI;
- the predictor Deployment and pods carry ``serving.kserve.io/inferenceservice`` and
  ``component: predictor`` (v0.15.2 ``pkg/constants/constants.go``), the container is
  ``kserve-container``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_kube import ISVC_URL as URL
from fake_kube import annotated, deployment, predictor_spec, ready
from fake_predictor import FakePredictor
from kfp import dsl
from kubernetes.client import (
    ApiException,
    V1ContainerState,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1Pod,
    V1PodStatus,
)

from components.runtime import kserve, volumes, waiting
from components.runtime.kserve import DeployFailed, RolloutWatch
from components.runtime.kube import KubeClient
from components.specs.params import ParamError, Serving
from components.steps.deploy import deploy

NEW_URI = "pvc://fmnist-models/fashion-mnist/run-42"
OLD_URI = "pvc://fmnist-models/fashion-mnist/run-41"
ISVC = "serving.kserve.io/v1beta1"
STEP_TIMEOUT = 5  # seconds: a step that never sees its model serve fails fast, not in 900 s


def predictor_pod(uri: str, waiting_reason: str | None = None, restarts: int = 0) -> V1Pod:
    state = None
    if waiting_reason:
        state = V1ContainerState(waiting=V1ContainerStateWaiting(reason=waiting_reason))
    status = V1ContainerStatus(
        name="kserve-container",
        restart_count=restarts,
        ready=not waiting_reason,
        image="serving",
        image_id="serving",
        state=state,
    )
    # KServe's pod mutator rewrites STORAGE_URI to the mount; the annotation keeps the URI
    # (kserve v0.15.2 pkg/webhook/admission/pod/storage_initializer_injector.go).
    return V1Pod(
        metadata=annotated(uri),
        spec=predictor_spec("/mnt/models"),
        status=V1PodStatus(phase="Running", container_statuses=[status]),
    )


@pytest.fixture(params=["v0.20.0", "v0.15.2"])
def kserve_release(request, fake_k8s, crd_schemas_at) -> str:
    """Serve one KServe release's InferenceService schema."""
    schema = crd_schemas_at("kserve", request.param)[(ISVC, "InferenceService")]
    fake_k8s.serve_schema(ISVC, "InferenceService", schema)
    return request.param


@pytest.fixture
def step(tmp_path, monkeypatch, fake_k8s, crd_schemas):
    """Call the deploy step as the KFP launcher would on a cluster (newest KServe)."""
    fake_k8s.serve_schema(ISVC, "InferenceService", crd_schemas[(ISVC, "InferenceService")])
    monkeypatch.setattr(waiting, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(kserve, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(volumes, "MODEL_STORE", str(tmp_path / "store"))
    monkeypatch.setattr(kserve, "current_namespace", lambda: "team-a")
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.pt").write_bytes(b"weights")
    (model / "model.json").write_text("{}")

    def call(run_id="run-42", accuracy=None, dataset=tmp_path / "unused", **changes):
        changes.setdefault("serving_timeout_seconds", STEP_TIMEOUT)
        return deploy.python_func(
            model=dsl.Model(uri=str(model)),
            dataset=dsl.Dataset(uri=str(dataset)),
            serving=Serving(**changes).to_dict(),
            target="cluster",
            run_id=run_id,
            accuracy=accuracy,
        )

    return call


def polls(fake_k8s) -> int:
    """How many times the step looked at the rollout (each poll lists the predictor pods)."""
    return len(fake_k8s.core.selectors)


def test_first_deploy_writes_the_mode_this_kserve_knows_and_waits_for_the_rollout(
    step, fake_k8s, kserve_release, tmp_path, validate_crd_at
):
    fake_k8s.custom.statuses["inferenceservices"] = [{}, ready(1)]
    fake_k8s.apps.deployments = [
        [],
        [deployment(NEW_URI, updated=0, available=0)],
        [deployment(NEW_URI)],
    ]
    assert step() == URL
    assert polls(fake_k8s) == 3  # waiting with no Deployment, with none available; done
    (isvc,) = fake_k8s.custom.created("inferenceservices")
    validate_crd_at("kserve", kserve_release)(isvc)
    mode = isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
    assert mode == ("RawDeployment" if kserve_release == "v0.15.2" else "Standard")
    container = isvc["spec"]["predictor"]["containers"][0]
    assert container["env"] == [{"name": "STORAGE_URI", "value": NEW_URI}]
    assert (tmp_path / "store" / "fashion-mnist" / "run-42" / "model.pt").read_bytes() == b"weights"
    assert fake_k8s.apps.selectors[0] == (
        "serving.kserve.io/inferenceservice=fashion-mnist,component=predictor"
    )


# A redeploy in Standard mode, poll by poll: each state lacks one thing of ROLLED_OUT, and
# the step must go on waiting (kubectl's rollout status rule: the new template observed,
# every desired replica updated and available, no old replica left).
ROLLING = [
    ("the Deployment still has the old model", [deployment(OLD_URI)]),
    ("the new template is not observed", [deployment(NEW_URI, generation=3, observed=2)]),
    ("no replica is updated", [deployment(NEW_URI, generation=3, observed=3, updated=0)]),
    (
        "the new replica is not available",
        [deployment(NEW_URI, generation=3, observed=3, available=0)],
    ),
    ("an old replica still runs", [deployment(NEW_URI, generation=3, observed=3, replicas=2)]),
]
ROLLED_OUT = [deployment(NEW_URI, generation=3, observed=3)]


def watch_at(fake_k8s, status: dict, mode: str = "Standard", generation: int = 3):
    """A RolloutWatch on a live service whose every read reports ``status``."""
    metadata = {"name": "fashion-mnist", "namespace": "team-a"}
    fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")] = {
        "metadata": metadata,
        "spec": {},
    }
    fake_k8s.custom.statuses["inferenceservices"] = [status]
    serving = Serving(deployment_mode=mode)
    return RolloutWatch(KubeClient(), "team-a", serving, NEW_URI, generation)


@pytest.mark.parametrize("state", [state for _, state in ROLLING], ids=[n for n, _ in ROLLING])
def test_a_standard_rollout_is_not_done_while(state, fake_k8s):
    watch = watch_at(fake_k8s, ready(3))
    fake_k8s.apps.deployments = [state]
    assert watch.check() is None


def test_a_rollout_waits_for_min_replicas_the_hpa_has_not_made_yet(fake_k8s):
    """KServe leaves an HPA-scaled Deployment at 1 replica and lets the HPA raise it to
    minReplicas (kserve v0.15.2 pkg/controller/v1beta1/inferenceservice/reconcilers/
    deployment/deployment_reconciler.go: Replicas only for autoscaler class "none"). Seen on
    the tier: the step said "serves" with one of two replicas, and a replica killed then
    left none."""
    watch = watch_at(fake_k8s, ready(3))
    watch.serving = Serving(serving_min_replicas=2, serving_max_replicas=2)
    fake_k8s.apps.deployments = [ROLLED_OUT]  # spec.replicas 1, 1 available
    assert watch.check() is None
    two = deployment(NEW_URI, generation=3, observed=3, updated=2, available=2, replicas=2)
    two.spec.replicas = 2
    fake_k8s.apps.deployments = [[two]]
    assert watch.check()["status"]["url"] == URL


def test_a_standard_rollout_is_done_with_every_new_replica_and_ready(fake_k8s):
    watch = watch_at(fake_k8s, ready(3))
    fake_k8s.apps.deployments = [ROLLED_OUT]
    assert watch.check()["status"]["url"] == URL
    not_ready = {**ready(3), "conditions": [{"type": "Ready", "status": "False"}]}
    assert watch_at(fake_k8s, not_ready).check() is None


def test_a_redeploy_waits_for_the_new_model_not_the_old_ready(step, fake_k8s, kserve_release):
    """Ready=True with the old Deployment serving is not the new model serving."""
    fake_k8s.custom.statuses["inferenceservices"] = [ready(1)]
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    step(run_id="run-41")
    before = polls(fake_k8s)
    fake_k8s.apps.deployments = [state for _, state in ROLLING] + [ROLLED_OUT]
    assert step() == URL
    assert polls(fake_k8s) - before == len(ROLLING) + 1  # waiting at each state, done at the last
    (call,) = [c for c in fake_k8s.custom.calls if c[0] == "replace"]
    assert call[5]["spec"]["predictor"]["containers"][0]["env"][0]["value"] == NEW_URI
    recorded = "RawDeployment"  # what the live status says
    expected = recorded if kserve_release == "v0.15.2" else "Standard"
    assert call[5]["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == expected


def test_a_new_predictor_that_crash_loops_fails_the_step_with_its_log(step, fake_k8s):
    fake_k8s.custom.statuses["inferenceservices"] = [ready(1)]
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    fake_k8s.core.pods = [[predictor_pod(OLD_URI), predictor_pod(NEW_URI, "CrashLoopBackOff", 3)]]
    fake_k8s.core.logs["fashion-mnist-predictor-abc"] = [
        "loading\nRuntimeError: no model.pt in /mnt/models\n"
    ]
    with pytest.raises(DeployFailed) as error:
        step()
    message = str(error.value)
    assert "cannot start: CrashLoopBackOff" in message
    assert "RuntimeError: no model.pt in /mnt/models" in message


def test_a_failed_rollout_puts_back_the_spec_that_was_serving(step, fake_k8s, capsys):
    """run-41 serves; run-42's predictor crash-loops: the service gets run-41's spec back."""
    fake_k8s.custom.statuses["inferenceservices"] = [ready(1)]
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    step(run_id="run-41")
    serving = fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")]
    before = serving["spec"]
    fake_k8s.core.pods = [[predictor_pod(OLD_URI), predictor_pod(NEW_URI, "CrashLoopBackOff", 3)]]
    with pytest.raises(DeployFailed, match="cannot start: CrashLoopBackOff"):
        step()
    replaced = [c[5] for c in fake_k8s.custom.calls if c[0] == "replace"]
    assert [uri_of(body) for body in replaced] == [NEW_URI, OLD_URI]  # applied, put back
    assert fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")]["spec"] == (
        before
    )
    assert (
        "rollout failed; restored InferenceService team-a/fashion-mnist to the spec that was "
        f"serving ({OLD_URI})"
    ) in capsys.readouterr().out


def uri_of(isvc: dict) -> str:
    return isvc["spec"]["predictor"]["containers"][0]["env"][0]["value"]


@pytest.fixture
def predictor(packed_small, fake_k8s):
    """The new model's answers, at the cluster-local address every status reports."""
    with FakePredictor(packed_small) as running:
        fake_k8s.custom.statuses["inferenceservices"] = [ready(1, address={"url": running.url})]
        yield running


def replaced_uris(fake_k8s) -> list[str]:
    return [uri_of(c[5]) for c in fake_k8s.custom.calls if c[0] == "replace"]


def test_a_model_that_passes_its_post_deploy_check_stays(step, fake_k8s, predictor, packed_small):
    """run-41 serves; run-42 rolls out and answers test images at its cluster-local address
    (status.address.url; status.url is the ingress host, unknown here) as well as evaluated."""
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    step(run_id="run-41")
    fake_k8s.apps.deployments = [ROLLED_OUT]
    assert step(accuracy=0.9, dataset=packed_small) == URL
    assert predictor.requests == [100] * 10
    assert replaced_uris(fake_k8s) == [NEW_URI]  # applied, not put back
    assert uri_of(fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")]) == (
        NEW_URI
    )


def test_a_model_that_fails_its_post_deploy_check_is_rolled_back_naming_what_serves(
    step, fake_k8s, predictor, packed_small, capsys
):
    """run-42 rolls out but answers wrongly: run-41's spec is put back, the step waits for its
    Deployment to roll out again, then fails in one line naming what serves and why."""
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    step(run_id="run-41")
    before = fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")]
    predictor.shift = 1
    back = [deployment(OLD_URI, generation=4, observed=4, updated=0), deployment(OLD_URI, 4, 4)]
    fake_k8s.apps.deployments = [ROLLED_OUT, *([d] for d in back)]
    polled = polls(fake_k8s)
    with pytest.raises(DeployFailed) as error:
        step(accuracy=0.9, dataset=packed_small)
    assert str(error.value) == (
        f"InferenceService team-a/fashion-mnist serves {OLD_URI} again; the new model "
        f"{NEW_URI} failed its post-deploy check: it answered 0.0000 of 1000 test images "
        "right, below 0.8621 (the evaluated accuracy 0.9000 less the tolerance 0.0379)"
    )
    assert polls(fake_k8s) - polled == 3  # the new model rolled out; the old one, in two
    assert replaced_uris(fake_k8s) == [NEW_URI, OLD_URI]
    after = fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")]
    assert (after["spec"], after["metadata"]["labels"]) == (
        before["spec"],
        before["metadata"]["labels"],
    )
    assert (
        "post-deploy check failed; restored InferenceService team-a/fashion-mnist to the spec "
        f"that was serving ({OLD_URI})"
    ) in capsys.readouterr().out


def test_a_rolled_back_model_whose_predecessor_does_not_serve_again_says_so(
    step, fake_k8s, predictor, packed_small
):
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    step(run_id="run-41")
    predictor.shift = 1
    fake_k8s.apps.deployments = [ROLLED_OUT, [deployment(OLD_URI, 4, 4, available=0)]]
    with pytest.raises(DeployFailed) as error:
        step(accuracy=0.9, dataset=packed_small, serving_timeout_seconds=1)
    assert str(error.value).startswith(
        f"InferenceService team-a/fashion-mnist was rolled back to {OLD_URI}, not serving yet "
        "(TimeoutError: InferenceService team-a/fashion-mnist did not finish within 1 s.); "
        f"the new model {NEW_URI} failed its post-deploy check: "
    )
    assert "\n" not in str(error.value)


def test_a_rollback_that_cannot_be_applied_says_so_in_one_line(
    step, fake_k8s, predictor, packed_small, capsys
):
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    step(run_id="run-41")
    predictor.shift = 1
    fake_k8s.apps.deployments = [ROLLED_OUT]
    # serve's read of the live service, the rollout's poll: answered; restore's: refused
    fake_k8s.fail("get", "inferenceservices", None, None, ApiException(403, "Forbidden"))
    with pytest.raises(DeployFailed) as error:
        step(accuracy=0.9, dataset=packed_small)
    assert str(error.value).startswith(
        "InferenceService team-a/fashion-mnist could not be rolled back (see the log); the "
        f"new model {NEW_URI} failed its post-deploy check: it answered 0.0000 of 1000"
    )
    assert (
        "post-deploy check failed; could not restore InferenceService team-a/fashion-mnist: "
        "403 Forbidden"
    ) in capsys.readouterr().out
    assert replaced_uris(fake_k8s) == [NEW_URI]


def test_a_service_taken_over_gets_its_own_spec_back_without_a_wait(
    step, fake_k8s, predictor, packed_small
):
    """Its spec names no STORAGE_URI of ours, so no Deployment can be told to be its."""
    theirs = {"predictor": {"model": {"storageUri": "s3://theirs"}}}
    metadata = {"name": "fashion-mnist", "namespace": "team-a", "resourceVersion": "1"}
    fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")] = {
        "metadata": {**metadata, "generation": 1},
        "spec": theirs,
    }
    predictor.shift = 1
    fake_k8s.apps.deployments = [ROLLED_OUT]
    with pytest.raises(DeployFailed) as error:
        step(accuracy=0.9, dataset=packed_small, take_over_service=True)
    assert str(error.value).startswith(
        "InferenceService team-a/fashion-mnist serves the spec that was serving again; the new "
        f"model {NEW_URI} failed its post-deploy check: "
    )
    assert polls(fake_k8s) == 1  # the new model's rollout; none for theirs
    assert fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")]["spec"] == (
        theirs
    )


def test_a_first_deploy_that_fails_its_check_stays_and_fails_in_one_line(
    step, fake_k8s, predictor, packed_small
):
    """Nothing served before: the new service is left (the steps' Role cannot delete it)."""
    predictor.statuses = [503]
    fake_k8s.apps.deployments = [[deployment(NEW_URI)]]
    with pytest.raises(DeployFailed) as error:
        step(accuracy=0.9, dataset=packed_small)
    assert str(error.value) == (
        "InferenceService team-a/fashion-mnist serves nothing else, so it stays on the new "
        f"model, which failed its post-deploy check (1 of 10 requests to {predictor.url} "
        "failed (first: HTTPError: HTTP Error 503: Service Unavailable)); kubectl delete "
        "inferenceservice fashion-mnist removes it"
    )
    assert [c[0] for c in fake_k8s.custom.calls if c[0] in ("create", "replace", "delete")] == [
        "create"
    ]


def test_an_inference_service_we_did_not_create_is_left_alone(step, fake_k8s):
    """Without our label an InferenceService of the same name is someone else's: the
    deploy fails in one line and changes nothing, unless take_over_service is set."""
    fake_k8s.custom.statuses["inferenceservices"] = [ready(1)]
    fake_k8s.apps.deployments = [[deployment(NEW_URI)]]
    theirs = {
        "name": "fashion-mnist",
        "namespace": "team-a",
        "resourceVersion": "1",
        "generation": 1,
    }
    fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")] = {
        "metadata": theirs,
        "spec": {"predictor": {"model": {"storageUri": "s3://theirs"}}},
    }
    with pytest.raises(DeployFailed) as error:
        step()
    assert str(error.value) == (
        "InferenceService team-a/fashion-mnist exists and was not created by this project (no "
        "label app.kubernetes.io/managed-by=fmnist-pipeline); deploy under another model_name, "
        "or set take_over_service=true to replace it"
    )
    assert [c for c in fake_k8s.custom.calls if c[0] in ("create", "replace")] == []
    assert step(take_over_service=True) == URL
    taken = fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")]
    assert uri_of(taken) == NEW_URI
    assert taken["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fmnist-pipeline"


def test_changing_the_mode_of_a_live_service_is_refused_naming_both(step, fake_k8s):
    fake_k8s.custom.statuses["inferenceservices"] = [ready(1, mode="Serverless")]
    fake_k8s.apps.deployments = [[deployment(OLD_URI)]]
    fake_k8s.custom.objects[("inferenceservices", "team-a", "fashion-mnist")] = {
        "metadata": {
            "name": "fashion-mnist",
            "namespace": "team-a",
            "resourceVersion": "1",
            "labels": {"app.kubernetes.io/managed-by": "fmnist-pipeline"},
        },
        "spec": {},
        "status": ready(1, mode="Serverless"),
    }
    with pytest.raises(DeployFailed) as error:
        step()
    message = str(error.value)
    assert "runs in Serverless mode" in message and "deployment_mode=Knative" in message
    assert "kubectl delete inferenceservice fashion-mnist" in message
    assert [c for c in fake_k8s.custom.calls if c[0] in ("create", "replace")] == []


def knative(created, ready_revision, traffic, generation=1) -> dict:
    """A Knative-mode status: the predictor's revisions and their traffic split."""
    predictor = {
        "latestCreatedRevision": created,
        "latestReadyRevision": ready_revision,
        "traffic": [{"revisionName": name, "percent": percent} for name, percent in traffic],
    }
    return ready(generation, mode="Knative", components={"predictor": predictor})


# A Knative-mode update, poll by poll (generation 2 applied): each state lacks one thing
# of KNATIVE_DONE (the update observed, the newest revision created, ready, at 100 %).
KNATIVE_ROLLING = [
    ("no status yet", {}),
    ("the update is not observed", knative("r-2", "r-2", [("r-2", 100)], generation=1)),
    ("the new revision is not ready", knative("r-2", "r-1", [("r-1", 100)], generation=2)),
    ("it takes 10 % of the traffic", knative("r-2", "r-2", [("r-1", 90), ("r-2", 10)], 2)),
    ("it takes 99 % of the traffic", knative("r-2", "r-2", [("r-1", 1), ("r-2", 99)], 2)),
]
KNATIVE_DONE = knative("r-2", "r-2", [("r-2", 100)], generation=2)


@pytest.mark.parametrize(
    "status", [status for _, status in KNATIVE_ROLLING], ids=[n for n, _ in KNATIVE_ROLLING]
)
def test_a_knative_rollout_is_not_done_while(status, fake_k8s):
    assert watch_at(fake_k8s, status, mode="Knative", generation=2).check() is None


def test_a_knative_rollout_is_done_when_the_new_revision_takes_all_traffic(fake_k8s):
    watch = watch_at(fake_k8s, KNATIVE_DONE, mode="Knative", generation=2)
    assert watch.check()["status"]["url"] == URL


def test_knative_waits_for_the_latest_revision_to_take_all_traffic(step, fake_k8s):
    """The step itself on a first deploy (generation 1): it serves only at the last state."""
    statuses = [
        {},
        knative("r-2", "r-1", [("r-1", 100)]),
        knative("r-2", "r-2", [("r-1", 90), ("r-2", 10)]),
        knative("r-2", "r-2", [("r-1", 1), ("r-2", 99)]),
        knative("r-2", "r-2", [("r-2", 100)]),
    ]
    fake_k8s.custom.statuses["inferenceservices"] = list(statuses)
    assert step(deployment_mode="Knative", serving_min_replicas=0) == URL
    assert polls(fake_k8s) == len(statuses)  # waiting at each state, done at the last


def test_a_model_that_fails_to_load_fails_the_step_with_the_conditions(step, fake_k8s):
    failed = {
        "conditions": [{"type": "Ready", "status": "False", "reason": "RevisionFailed"}],
        "modelStatus": {
            "states": {"targetModelState": "FailedToLoad"},
            "lastFailureInfo": {"reason": "ModelLoadFailed", "message": "no model.pt"},
        },
    }
    fake_k8s.custom.statuses["inferenceservices"] = [failed]
    with pytest.raises(DeployFailed, match="model failed to load: ModelLoadFailed: no model.pt"):
        step()


def test_a_service_that_never_serves_times_out_with_its_conditions(step, fake_k8s):
    fake_k8s.custom.statuses["inferenceservices"] = [
        {"conditions": [{"type": "Ready", "status": "False", "reason": "Deploying"}]}
    ]
    with pytest.raises(TimeoutError, match="did not finish within 1 s") as error:
        step(serving_timeout_seconds=1)
    assert "Ready=False (Deploying)" in str(error.value)


def test_bad_serving_values_fail_before_any_api_call(step, fake_k8s):
    with pytest.raises(ParamError, match="serving_min_replicas must be an integer >= 1"):
        step(serving_min_replicas=0)
    assert fake_k8s.custom.calls == []


def test_local_predictor_that_cannot_load_fails_with_its_output(tmp_path):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(RuntimeError, match="the predictor exited with code 2") as error:
        deploy.python_func(
            model=dsl.Model(uri=str(empty)),
            dataset=dsl.Dataset(uri=str(tmp_path / "data")),
            serving=Serving().to_dict(),
            target="local",
            run_id="r",
        )
    assert "no model.pt" in str(error.value)
    assert Path(empty).is_dir()
