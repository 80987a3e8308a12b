"""Shared fixtures: the real dataset, a small trained model, and CRD schema validation."""

from __future__ import annotations

import copy
import email.parser
import email.policy
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import jsonschema
import kubernetes
import pytest
import yaml
from kubernetes.client import V1ContainerStatus, V1ObjectMeta, V1Pod, V1PodList, V1PodStatus
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FMNIST_SHARED_DIR", REPO.parent / "shared"))
CRDS = SHARED / "crds"
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster on the CRDs


@pytest.fixture(scope="session")
def fashion_mnist_dir() -> Path:
    """The real raw FashionMNIST files ($FASHION_MNIST_DIR, else Debian's package)."""
    from trainer.data import find_raw_dir

    return find_raw_dir(download=False)


@pytest.fixture(scope="session")
def packed_small(tmp_path_factory, fashion_mnist_dir) -> Path:
    """A packed slice of the real data: the first 4,000 train and 1,000 test images."""
    from trainer.data import pack

    out = tmp_path_factory.mktemp("packed-small")
    pack(out, fashion_mnist_dir, train_limit=4000, test_limit=1000)
    return out


@pytest.fixture(scope="session")
def trained_model_dir(tmp_path_factory, packed_small) -> Path:
    """A model directory from one real `python -m trainer` epoch on the small slice."""
    out = tmp_path_factory.mktemp("model")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--epochs",
            "2",
            "--data-dir",
            str(packed_small),
            "--model-dir",
            str(out),
            "--log-interval",
            "1000",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return out


def _strict(schema: dict) -> dict:
    """Reject unknown fields, as the API server does with fieldValidation=Strict."""
    schema = copy.deepcopy(schema)

    def visit(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema


def _load_crd_schemas() -> dict[tuple[str, str], dict]:
    schemas = {}
    for path in sorted(CRDS.rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=_YAML_LOADER):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                schemas[(f"{group}/{version['name']}", kind)] = _strict(schema)
    return schemas


@pytest.fixture(scope="session")
def crd_schemas() -> dict[tuple[str, str], dict]:
    """openAPIV3Schema of every upstream CRD in ../shared/crds, keyed by (apiVersion, kind)."""
    assert CRDS.is_dir(), f"upstream CRDs not found at {CRDS} (set FMNIST_SHARED_DIR)"
    return _load_crd_schemas()


@pytest.fixture(scope="session")
def validate_crd(crd_schemas):
    """Validate an object against its upstream CRD schema; raises on any violation."""
    validators = {}  # jsonschema.validate would re-check the (huge, upstream) schema each call

    def validate(obj: dict) -> None:
        key = (obj["apiVersion"], obj["kind"])
        assert key in crd_schemas, f"no upstream CRD for {key}"
        if key not in validators:
            cls = jsonschema.validators.validator_for(crd_schemas[key])
            validators[key] = cls(crd_schemas[key])
        validators[key].validate(obj)

    return validate


# --- Katib (issue 5) ------------------------------------------------------------------
KATIB_OPENAPI = CRDS / "katib" / "katib-openapi-spec.swagger.json"
_TRIAL_PARAM = re.compile(r"\$\{trialParameters\..+?\}")
_META_REFERENCE = re.compile(r"\$\{trialSpec\.(Name|Namespace|Kind|APIVersion)\}")


@pytest.fixture(scope="session")
def validate_katib_experiment(validate_crd):
    """Check an Experiment the way the API server plus Katib's webhook would, offline.

    1. Strict jsonschema against ``v1beta1.Experiment`` in Katib's OpenAPI spec ($refs
       resolved; unknown fields rejected where the spec lists properties).
    2. The webhook's rules (validator.go): name, trial counts, objective, parameters, every
       ``${trialParameters.x}`` declared and used, trialSpec without name/namespace, and a
       metrics filter with two groups.
    3. The trialSpec (an unstructured object to the spec) after Katib substitutes example
       values, against its own CRD with ``validate_crd``.
    """
    spec = json.loads(KATIB_OPENAPI.read_text())
    root = _strict({"$ref": "#/components/schemas/v1beta1.Experiment", **spec})
    validator = jsonschema.Draft7Validator(root)

    def validate(experiment: dict) -> dict:
        validator.validate(experiment)
        _katib_webhook_rules(experiment)
        job = _substituted_trial(experiment)
        validate_crd(job)
        return job

    return validate


def _katib_webhook_rules(experiment: dict) -> None:
    spec, template = experiment["spec"], experiment["spec"]["trialTemplate"]
    assert re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", experiment["metadata"]["name"])
    assert spec["maxTrialCount"] > 0 and spec["parallelTrialCount"] > 0
    assert 0 <= spec["maxFailedTrialCount"] <= spec["maxTrialCount"]
    assert spec["parallelTrialCount"] <= spec["maxTrialCount"]
    objective = spec["objective"]
    assert objective["type"] in ("maximize", "minimize") and objective["objectiveMetricName"]
    assert objective["objectiveMetricName"] not in objective.get("additionalMetricNames", [])
    assert spec["parameters"], "spec.parameters must be specified"
    for param in spec["parameters"]:
        assert param["parameterType"] in ("int", "double", "categorical", "discrete")
        assert "min" in param["feasibleSpace"] or "max" in param["feasibleSpace"]
    assert template["primaryContainerName"]
    assert template["successCondition"] and template["failureCondition"]
    names = {param["name"] for param in spec["parameters"]}
    text = json.dumps(template["trialSpec"])
    for trial_param in template["trialParameters"]:
        reference = trial_param["reference"]
        assert reference in names or _META_REFERENCE.fullmatch(reference), reference
        placeholder = f"${{trialParameters.{trial_param['name']}}}"
        assert placeholder in text, f"{placeholder} is declared but unused"
        text = text.replace(placeholder, "test-value")
    assert not _TRIAL_PARAM.findall(text), f"undeclared: {_TRIAL_PARAM.findall(text)}"
    metadata = template["trialSpec"].get("metadata", {})
    assert "name" not in metadata and "namespace" not in metadata
    for metrics_format in spec["metricsCollectorSpec"]["source"]["filter"]["metricsFormat"]:
        assert re.compile(metrics_format).groups >= 2


def _substituted_trial(experiment: dict) -> dict:
    """The trial job Katib would create, with each parameter at its min (or a name)."""
    bounds = {p["name"]: p["feasibleSpace"]["min"] for p in experiment["spec"]["parameters"]}
    text = json.dumps(experiment["spec"]["trialTemplate"]["trialSpec"])
    for trial_param in experiment["spec"]["trialTemplate"]["trialParameters"]:
        value = bounds.get(trial_param["reference"], "example-trial")
        text = text.replace(f"${{trialParameters.{trial_param['name']}}}", value)
    job = json.loads(text)
    job["metadata"].update(name="example-trial", namespace="example")
    return job


# --- a Kubeflow Pipelines API server for fmnist submit / schedule (issue 5) -------------
class FakeKFP(http.server.BaseHTTPRequestHandler):
    """The KFP v2beta1 REST endpoints ``kfp.Client`` calls, in memory.

    Every request is recorded in ``self.server.log`` as ``(method, path, query, body)``
    (JSON bodies parsed; an upload's body is {"uploadfile": bytes}); pipelines,
    versions, experiments, runs and recurring runs live in ``self.server.state``.
    """

    ROUTES = [  # (method, path under /apis/v2beta1/, handler)
        ("GET", r"healthz", "healthz"),
        ("GET", r"pipelines", "list_pipelines"),
        ("POST", r"pipelines/upload", "upload"),
        ("POST", r"pipelines/upload_version", "upload_version"),
        ("GET", r"pipelines/(?P<pipeline_id>[^/]+)/versions", "list_versions"),
        ("GET", r"experiments", "list_experiments"),
        ("POST", r"experiments", "create_experiment"),
        ("POST", r"runs", "create_run"),
        ("POST", r"recurringruns", "create_recurring"),
        ("GET", r"recurringruns", "list_recurring"),
        ("POST", r"recurringruns/(?P<rid>[^/:]+):disable", "disable_recurring"),
        ("DELETE", r"recurringruns/(?P<rid>[^/:]+)", "delete_recurring"),
    ]

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        self.query, self.body = dict(urllib.parse.parse_qsl(url.query)), self._body()
        self.server.log.append((self.command, url.path, self.query, self.body))
        self.state = self.server.state
        path = url.path.removeprefix("/apis/v2beta1/")
        for method, pattern, handler in self.ROUTES:
            found = re.fullmatch(pattern, path)
            if method == self.command and found:
                return self._reply(*getattr(self, handler)(**found.groupdict()))
        return self._reply(404, {"message": f"no route for {self.command} {path}"})

    do_POST = do_DELETE = do_GET

    def _body(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = self.headers.get("Content-Type", "")
        if not kind.startswith("multipart/"):
            return json.loads(raw) if raw else None
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {kind}\r\n\r\n".encode() + raw
        )
        return {
            part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
            for part in message.iter_parts()
        }

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _id(self, kind: str) -> str:
        return f"{kind}-{len(self.server.log)}"

    def _named(self, items):
        wanted = json.loads(self.query.get("filter") or '{"predicates": []}')["predicates"]
        return [i for i in items if all(i["display_name"] == p["stringValue"] for p in wanted)]

    def healthz(self):
        return 200, {"multi_user": False}

    def list_pipelines(self):
        return 200, {"pipelines": self._named(self.state["pipelines"].values())}

    def upload(self):
        pipeline = {"pipeline_id": self._id("pipeline"), "display_name": self.query["name"]}
        self.state["pipelines"][pipeline["pipeline_id"]] = pipeline
        self._add_version(pipeline["pipeline_id"], self.query["name"])
        return 200, pipeline

    def upload_version(self):
        if self.query.get("pipelineid") not in self.state["pipelines"]:
            return 404, {"message": "pipeline not found"}
        return 200, self._add_version(self.query["pipelineid"], self.query["name"])

    def _add_version(self, pipeline_id: str, name: str) -> dict:
        version = {
            "pipeline_version_id": self._id("version"),
            "display_name": name,
            "pipeline_id": pipeline_id,
        }
        self.state["versions"].append(version)
        return version

    def list_versions(self, pipeline_id):
        found = [v for v in self.state["versions"] if v["pipeline_id"] == pipeline_id][::-1]
        return 200, {"pipeline_versions": found[: int(self.query.get("page_size", 10))]}

    def list_experiments(self):
        return 200, {"experiments": self._named(self.state["experiments"])}

    def create_experiment(self):
        self.state["experiments"].append({**self.body, "experiment_id": self._id("experiment")})
        return 200, self.state["experiments"][-1]

    def create_run(self):
        self.state["runs"].append({**self.body, "run_id": self._id("run")})
        return 200, self.state["runs"][-1]

    def create_recurring(self):
        recurring = {**self.body, "recurring_run_id": self._id("recurring")}
        self.state["recurring"][recurring["recurring_run_id"]] = recurring
        return 200, recurring

    def list_recurring(self):  # this one field is camelCase in KFP's proto
        return 200, {"recurringRuns": list(self.state["recurring"].values())}

    def disable_recurring(self, rid):
        if rid not in self.state["recurring"]:
            return 404, {"message": f"recurring run {rid} not found"}
        self.state["recurring"][rid].update(mode="DISABLE", status="DISABLED")
        return 200, {}

    def delete_recurring(self, rid):
        if self.state["recurring"].pop(rid, None) is None:
            return 404, {"message": f"recurring run {rid} not found"}
        return 200, {}


@pytest.fixture
def kfp_server():
    """A local HTTP server speaking the KFP v2beta1 REST API (see FakeKFP); yields it.

    ``.url`` is its base URL, ``.log`` the requests it got, ``.state`` what it holds.
    """
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeKFP)
    server.log = []
    server.state = {"pipelines": {}, "versions": [], "experiments": [], "runs": [], "recurring": {}}
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# --- fake Kubernetes API (issue 4) ----------------------------------------------------
# ``fake_k8s`` replaces ``kubernetes.client.CustomObjectsApi`` and ``CoreV1Api`` (and the
# in-cluster config loader) with in-memory fakes, so components run unmodified: they
# create, read, replace and delete objects and read pods and logs as against a cluster.
# Tests script what the "cluster" reports (statuses, pods, logs) and inspect every call.


class FakeCustomObjects:
    """Custom objects in memory; each ``get`` applies the next scripted status of its plural."""

    def __init__(self):
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.statuses: dict[str, list[dict]] = {}  # plural -> statuses, one per get
        self.listings: dict[str, list[list[dict]]] = {}  # plural -> items, one per list
        self.calls: list[tuple] = []
        self.version = 0

    def _store(self, plural, namespace, body):
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        body["metadata"]["generation"] = body["metadata"].get("generation", 0) + 1
        self.objects[(plural, namespace, body["metadata"]["name"])] = body
        return copy.deepcopy(body)

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.calls.append(("create", group, version, namespace, plural, copy.deepcopy(body)))
        if (plural, namespace, body["metadata"]["name"]) in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._store(plural, namespace, body)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("get", group, version, namespace, plural, name))
        stored = self.objects.get((plural, namespace, name))
        if stored is None:
            raise ApiException(status=404, reason="NotFound")
        script = self.statuses.get(plural, [])
        if script:
            stored["status"] = copy.deepcopy(script.pop(0) if len(script) > 1 else script[0])
        return copy.deepcopy(stored)

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=None):
        self.calls.append(("list", group, version, namespace, plural, label_selector))
        script = self.listings.get(plural, [[]])
        return {"items": copy.deepcopy(script.pop(0) if len(script) > 1 else script[0])}

    def replace_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        self.calls.append(("replace", group, version, namespace, plural, copy.deepcopy(body)))
        current = self.objects[(plural, namespace, name)]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        body = copy.deepcopy(body)
        body["metadata"]["generation"] = current["metadata"]["generation"]
        return self._store(plural, namespace, body)

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body=None):
        self.calls.append(("delete", group, version, namespace, plural, name))
        if self.objects.pop((plural, namespace, name), None) is None:
            raise ApiException(status=404, reason="NotFound")

    def verbs(self) -> list[tuple[str, str]]:
        """(verb, plural) of every call, in order."""
        return [(call[0], call[4]) for call in self.calls]

    def created(self, plural: str) -> list[dict]:
        """The bodies of every create call for ``plural``."""
        return [call[5] for call in self.calls if call[0] == "create" and call[4] == plural]


class FakeCore:
    """Pods and their logs: each list call and each log read returns the next scripted one."""

    def __init__(self):
        self.pods: list[list[V1Pod]] = [[]]  # the pods each list call sees; the last one stays
        self.logs: dict[str, list[str]] = {}
        self.selectors: list[str] = []

    def list_namespaced_pod(self, namespace, label_selector=None):
        self.selectors.append(label_selector)
        return V1PodList(items=self.pods.pop(0) if len(self.pods) > 1 else self.pods[0])

    def read_namespaced_pod_log(self, name, namespace, container=None):
        script = self.logs.get(name, [""])
        return script.pop(0) if len(script) > 1 else script[0]


def master_pod(name: str, uid: str = "uid-1", restarts: int = 0, phase: str = "Running") -> V1Pod:
    """A master pod as the training operator labels it."""
    status = V1ContainerStatus(
        name="pytorch", restart_count=restarts, ready=True, image="trainer", image_id="trainer"
    )
    return V1Pod(
        metadata=V1ObjectMeta(name=name, uid=uid),
        status=V1PodStatus(phase=phase, container_statuses=[status]),
    )


class FakeCluster:
    """Both fake APIs together."""

    def __init__(self):
        self.custom, self.core = FakeCustomObjects(), FakeCore()


@pytest.fixture
def fake_k8s(monkeypatch) -> FakeCluster:
    """Route every kubernetes client call to an in-memory fake cluster."""
    cluster = FakeCluster()
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", lambda: None)
    monkeypatch.setattr(kubernetes.client, "CustomObjectsApi", lambda *a, **k: cluster.custom)
    monkeypatch.setattr(kubernetes.client, "CoreV1Api", lambda *a, **k: cluster.core)
    return cluster


@pytest.fixture
def master_pod_factory():
    """Build master pods for ``FakeCore.pods``."""
    return master_pod
