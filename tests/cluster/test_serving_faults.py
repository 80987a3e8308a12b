"""The predictor under traffic: a new model rolled out, a replica killed, on real pods.

The deploy step (components/steps/deploy.py) runs here as the pipeline's account and serves
a model from a workspace PVC with two replicas (Standard mode: a Deployment). Eight clients
send a steady stream of v1 and v2 requests to the predictor's Service, through kube-proxy
(iptables, harness/node.py), the way a caller inside the cluster does, while the deploy
step rolls out a second model, rolls back one that fails its post-deploy check, and while
one replica's container is killed.

Upstream behaviour relied on:
- kserve v0.15.2 pkg/controller/v1beta1/inferenceservice/reconcilers/deployment/
  deployment_reconciler.go: a Deployment of minReplicas (RollingUpdate: Kubernetes'
  defaults, 25 % surge and unavailable), a TCP readiness probe on 8080; reconcilers/service:
  a Service ``<name>-predictor`` on port 80 to 8080.
- k8s.io/kubernetes v1.36.3 pkg/proxy/iptables/proxier.go: only ready endpoints get new
  connections; a terminating pod leaves the Service's endpoints when its deletion starts
  (pkg/controller/endpointslice), and its preStop hook runs before SIGTERM
  (pkg/kubelet/kuberuntime/kuberuntime_container.go killContainer).
- kserve v0.15.2 pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/
  kube_ingress_reconciler.go (``Reconcile``) and httproute_reconciler.go
  (``getRawServiceHost``): once the predictor is ready, ``status.address.url`` is
  ``http://<name>-predictor.<namespace>.svc.cluster.local``, where the post-deploy check
  sends its test images.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
import requests
from fault_helpers import kill_container
from real_pods import (  # noqa: F401  (real_namespace: this module's ``namespace``)
    bind_workspace,
    describe_pods,
    pods_of,
    real_namespace,
)
from test_real_serving import STORE, local_probabilities

from components.runtime import kserve, volumes
from components.specs.inferenceservice import PREDICTOR_CONTAINER
from components.specs.params import Serving
from serving.defaults import MODEL_NAME
from trainer.model import build_model, load_model_dir, save_model_dir
from trainer.model_dir import ModelCard

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods, pytest.mark.usefixtures("quick_polls")]
CLIENTS = 8  # half speak v1, half v2
IMAGES = 4  # known test images per request
ISVC = ("serving.kserve.io", "v1beta1")


@pytest.fixture
def images(packed_small) -> np.ndarray:
    """The first IMAGES real test images, uint8 [N, 28, 28]."""
    from trainer.data import load_packed

    return np.array(load_packed(packed_small).test.images[:IMAGES])


@pytest.fixture
def second_model(tmp_path, trained_model_dir) -> object:
    """Another model of the same card: an untrained network, whose answers differ."""
    import json

    card = ModelCard(**json.loads((trained_model_dir / "model.json").read_text()))
    return save_model_dir(build_model(), tmp_path / "second", card)


@dataclass
class Traffic:
    """CLIENTS threads sending requests to the predictor until stopped; every answer kept."""

    url: str
    images: np.ndarray
    answers: list = field(default_factory=list)  # (time, protocol, labels or the error)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Traffic:
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(CLIENTS)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join()

    def _client(self, index: int) -> None:
        session, v2 = requests.Session(), index % 2 == 1
        pixels = [image.tolist() for image in self.images]
        while not self._stop.is_set():
            try:
                if v2:
                    tensor = {"name": "image", "shape": [IMAGES, 28, 28], "datatype": "UINT8"}
                    body = {"inputs": [tensor | {"data": self.images.reshape(-1).tolist()}]}
                    answer = session.post(
                        f"{self.url}/v2/models/{MODEL_NAME}/infer", json=body, timeout=10
                    )
                    answer.raise_for_status()
                    (labels,) = [
                        o["data"] for o in answer.json()["outputs"] if o["name"] == "label"
                    ]
                else:
                    answer = session.post(
                        f"{self.url}/v1/models/{MODEL_NAME}:predict",
                        json={"instances": pixels},
                        timeout=10,
                    )
                    answer.raise_for_status()
                    labels = [p["label"] for p in answer.json()["predictions"]]
                self.answers.append((time.monotonic(), "v2" if v2 else "v1", tuple(labels)))
            except (requests.RequestException, KeyError, ValueError) as error:
                self.answers.append((time.monotonic(), "v2" if v2 else "v1", error))

    def failures(self, since: float = 0.0, until: float = float("inf")) -> list:
        """The requests that failed in a time window."""
        return [a for a in self.answers if since <= a[0] <= until and isinstance(a[2], Exception)]


def deploy(namespace: str, core, model_dir, serving: Serving, accuracy=None, dataset=None) -> str:
    """The deploy step; returns the URL it reports.

    With ``accuracy`` (and the packed ``dataset``), the post-deploy check runs.
    """
    from kfp import dsl

    from components.steps.deploy import deploy as deploy_step

    try:
        return deploy_step.python_func(
            model=dsl.Model(uri=str(model_dir)),
            dataset=dsl.Dataset(uri=str(dataset or model_dir)),
            serving=serving.to_dict(),
            target="cluster",
            run_id=f"run-{uuid.uuid4().hex[:6]}",
            accuracy=accuracy,
        )
    except BaseException:
        print(describe_pods(core, namespace))
        raise


def service_url(core, namespace: str) -> str:
    """The predictor Service's ClusterIP address (kube-proxy routes it on this machine)."""
    service = core.read_namespaced_service(f"{MODEL_NAME}-predictor", namespace)
    return f"http://{service.spec.cluster_ip}:{service.spec.ports[0].port}"


def labels_of(model_dir, images) -> tuple:
    return tuple(local_probabilities(model_dir, images).argmax(axis=1).tolist())


@pytest.fixture
def two_replicas(as_pipeline, namespace, core, monkeypatch, trained_model_dir) -> Serving:
    """The first model served by two replicas of half a CPU each; the serving set."""
    store = bind_workspace(core, namespace, STORE)
    monkeypatch.setattr(volumes, "MODEL_STORE", str(store.path))
    serving = Serving(
        model_pvc=STORE,
        serving_min_replicas=2,
        serving_max_replicas=2,
        serving_cpu="500m",
        serving_memory="1Gi",
        serving_timeout_seconds=420,
    )
    deploy(namespace, core, trained_model_dir, serving)
    return serving


def test_a_new_model_rolls_out_under_traffic_without_a_failed_request(
    two_replicas, namespace, core, images, trained_model_dir, second_model, record_property
):
    """Eight clients through the rollout: none fails; afterwards every answer is the new
    model's."""
    first, second = labels_of(trained_model_dir, images), labels_of(second_model, images)
    assert first != second
    with Traffic(service_url(core, namespace), images) as traffic:
        time.sleep(3)
        started = time.monotonic()
        deploy(namespace, core, second_model, two_replicas)
        rolled_out = time.monotonic()
        time.sleep(5)
    assert traffic.failures() == [], traffic.failures()[:5]
    after = [a for a in traffic.answers if a[0] > rolled_out + 1]
    assert after and {a[2] for a in after} == {second}, Counter(a[2] for a in after)
    during = Counter(a[2] for a in traffic.answers if started <= a[0] <= rolled_out)
    record_property("requests", len(traffic.answers))
    record_property("rollout_seconds", round(rolled_out - started, 1))
    record_property("answers_during_rollout", {str(k): v for k, v in during.items()})


@pytest.fixture
def broken_model(tmp_path, trained_model_dir) -> object:
    """A model directory whose weights are cut short: the predictor exits 2 loading it."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.json").write_bytes((trained_model_dir / "model.json").read_bytes())
    (broken / "model.pt").write_bytes((trained_model_dir / "model.pt").read_bytes()[:1000])
    return broken


def test_a_new_model_that_fails_to_load_leaves_the_old_one_serving(
    two_replicas, namespace, core, custom, images, trained_model_dir, broken_model, capsys
):
    """Eight clients while the deploy step rolls out a model that cannot load: its pod
    exits, the step puts back the spec that was serving and fails in one line; no request
    fails, every answer is the first model's, and the new ReplicaSet goes away.

    kubernetes v1.36.3 pkg/controller/deployment/rolling.go: with two replicas and 25 %
    unavailable (rounded down: none), the old pods stay until a new one is available."""
    first = labels_of(trained_model_dir, images)
    before = custom.get_namespaced_custom_object(*ISVC, namespace, "inferenceservices", MODEL_NAME)
    with Traffic(service_url(core, namespace), images) as traffic:
        time.sleep(3)
        with pytest.raises(kserve.DeployFailed, match="cannot start: "):
            deploy(namespace, core, broken_model, two_replicas)
        out = capsys.readouterr().out
        assert f"rollout failed; restored InferenceService {namespace}/{MODEL_NAME}" in out
        predictors = f"{kserve.ISVC_LABEL}={MODEL_NAME}"
        deadline = time.monotonic() + 120
        while len(pods_of(core, namespace, predictors)) != 2 and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(3)
    after = custom.get_namespaced_custom_object(*ISVC, namespace, "inferenceservices", MODEL_NAME)
    assert after["spec"]["predictor"] == before["spec"]["predictor"]
    assert len(pods_of(core, namespace, predictors)) == 2, describe_pods(core, namespace)
    assert traffic.failures() == [], traffic.failures()[:5]
    assert {a[2] for a in traffic.answers} == {first}, Counter(a[2] for a in traffic.answers)


@pytest.fixture
def scrambled_model(tmp_path, trained_model_dir) -> object:
    """The trained model with each weight tensor's values shuffled: it loads and serves, and
    answers wrongly (about one image in ten right)."""
    import torch

    network, card = load_model_dir(trained_model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in network.state_dict().values():
            flat = tensor.view(-1)
            flat.copy_(flat[torch.randperm(flat.numel(), generator=generator)])
    return save_model_dir(network, tmp_path / "scrambled", card)


@pytest.fixture
def cluster_dns(monkeypatch, core) -> None:
    """``<service>.<namespace>.svc.cluster.local`` resolves here as in a pod: to the Service's
    ClusterIP. The step runs in this process, whose resolver does not ask the cluster's
    CoreDNS (harness/dns.py); kube-proxy then routes the address as for a pod."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".svc.cluster.local"):
            name, service_namespace = host.split(".")[:2]
            host = core.read_namespaced_service(name, service_namespace).spec.cluster_ip
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def evaluated_accuracy(model_dir, packed) -> float:
    """The model's accuracy on the slice the post-deploy check sends, computed here."""
    from components.runtime.post_deploy import CHECK_IMAGES
    from trainer.data import load_packed

    test = load_packed(packed).test.head(CHECK_IMAGES)
    predicted = local_probabilities(model_dir, np.array(test.images)).argmax(axis=1)
    return float((predicted == test.labels).mean())


@pytest.mark.usefixtures("cluster_dns")
def test_a_promoted_model_that_answers_wrongly_is_rolled_back_under_traffic(
    two_replicas,
    namespace,
    core,
    custom,
    images,
    packed_small,
    trained_model_dir,
    scrambled_model,
    capsys,
):
    """The gate passed a model at the first model's accuracy, but what rolls out answers
    wrongly (its weights scrambled; it loads and serves): the post-deploy check fails, the
    first model's spec is put back and rolls out again, and the step fails in one line
    naming what serves. Eight clients all along: no request fails, and afterwards every
    answer is the first model's. The check reaches the service at ``status.address.url``
    (kserve v0.15.2 pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/
    kube_ingress_reconciler.go, ``Reconcile``)."""
    first = labels_of(trained_model_dir, images)
    assert labels_of(scrambled_model, images) != first
    accuracy = evaluated_accuracy(trained_model_dir, packed_small)
    before = custom.get_namespaced_custom_object(*ISVC, namespace, "inferenceservices", MODEL_NAME)
    with Traffic(service_url(core, namespace), images) as traffic:
        time.sleep(3)
        with pytest.raises(kserve.DeployFailed) as error:
            deploy(namespace, core, scrambled_model, two_replicas, accuracy, packed_small)
        rolled_back = time.monotonic()
        time.sleep(5)
    message = str(error.value)
    assert message.startswith(
        f"InferenceService {namespace}/{MODEL_NAME} serves {kserve.storage_uri_of(before)} "
        "again; the new model "
    ), message
    assert "failed its post-deploy check: it answered " in message and "\n" not in message
    assert "post-deploy check failed; restored InferenceService" in capsys.readouterr().out
    after = custom.get_namespaced_custom_object(*ISVC, namespace, "inferenceservices", MODEL_NAME)
    assert after["spec"]["predictor"] == before["spec"]["predictor"]
    assert traffic.failures() == [], traffic.failures()[:5]
    late = [a for a in traffic.answers if a[0] > rolled_back + 1]
    assert late and {a[2] for a in late} == {first}, Counter(a[2] for a in late)


def test_a_killed_replica_costs_a_bounded_number_of_requests(
    two_replicas, namespace, core, images, record_property
):
    """One of two replicas' containers SIGKILLed under traffic: the requests that fail are
    those on its connections and those sent to it before its endpoint left the Service
    (about a second: the kubelet's status, the EndpointSlice, kube-proxy's rules)."""
    with Traffic(service_url(core, namespace), images) as traffic:
        time.sleep(3)
        victim = next(
            p
            for p in pods_of(core, namespace, f"{kserve.ISVC_LABEL}={MODEL_NAME}")
            if p.metadata.deletion_timestamp is None
        )
        killed = time.monotonic()
        kill_container(victim, PREDICTOR_CONTAINER)
        time.sleep(15)
    failed = traffic.failures()
    record_property("requests", len(traffic.answers))
    record_property("failed_requests", len(failed))
    assert all(killed <= f[0] <= killed + 3 for f in failed), failed[:5]
    assert len(failed) <= 4 * CLIENTS, (len(failed), failed[:5])
    answered = [a for a in traffic.answers if killed + 3 < a[0] and not isinstance(a[2], Exception)]
    assert len(answered) > 1000  # the other replica answered all along
