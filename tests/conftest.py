"""Shared fixtures: the real dataset, a small trained model, and CRD schema validation."""

from __future__ import annotations

import ast
import copy
import email.parser
import email.policy
import functools
import hashlib
import http.server
import importlib.util
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import threading
import types
import urllib.parse
from pathlib import Path

import jsonschema
import kubernetes
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster on the CRDs


def _import_upstream():
    """tools/upstream.py (pinned upstream Go modules' files), imported by path."""
    spec = importlib.util.spec_from_file_location("fmnist_upstream", REPO / "tools" / "upstream.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


upstream = _import_upstream()

# The cluster and gpu tiers wait on real controllers and devices, the soak tier repeats
# whole runs (pyproject's bound is for the default tier): each of their tests gets this
# bound unless it sets its own.
TIER_TIMEOUT_SECONDS = {"cluster": 1200, "gpu": 600, "soak": 1800}


def pytest_collection_modifyitems(items):
    """Give cluster, gpu and soak tests their tier's time bound (a test's own mark wins)."""
    for item in items:
        if item.get_closest_marker("timeout"):
            continue
        bounds = [s for tier, s in TIER_TIMEOUT_SECONDS.items() if item.get_closest_marker(tier)]
        if bounds:
            item.add_marker(pytest.mark.timeout(max(bounds)))


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


_GO_INLINE_FLAGS = re.compile(r"^\^\(\?([ims]+)\)")  # "^(?i)…": RE2 takes flags anywhere


def _strict(schema: dict) -> dict:
    """Reject unknown fields, as the API server does with fieldValidation=Strict.

    Patterns are Go (RE2) regular expressions, which the apiserver checks: one that sets a
    flag after ``^`` (Kueue's AdmissionCheck ``parameters.kind``: ``^(?i)[a-z]…``) is
    rewritten with the flag first, where Python's ``re`` wants it; the match is the same.
    """
    schema = copy.deepcopy(schema)

    def visit(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            if isinstance(node.get("pattern"), str):
                node["pattern"] = _GO_INLINE_FLAGS.sub(r"(?\1)^", node["pattern"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema


def _upstream(call, *args):
    """``call(*args)`` from tools/upstream.py; without Go the test is skipped (or fails).

    The schemas come from the pinned upstream Go modules (tools/controlplane/*/go.mod,
    tools/schemas/go.mod), fetched with ``go mod download``. Where there is no Go the schema
    tests are not run, unless FMNIST_REQUIRE_UPSTREAM=1 (CI) makes that a failure.
    """
    try:
        return call(*args)
    except upstream.GoMissing as error:
        if os.environ.get("FMNIST_REQUIRE_UPSTREAM") == "1":
            pytest.fail(f"{error} (FMNIST_REQUIRE_UPSTREAM=1)", pytrace=False)
        pytest.skip(f"{error}, then run the tests again")


_SCHEMA_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fmnist-pipeline"


@functools.cache
def _load_crd_schemas(name: str) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> strict openAPIV3Schema of each CRD of ``upstream.SCHEMAS[name]``.

    Parsed once per machine: the result is kept as JSON (10x faster to read than the YAML)
    under ~/.cache/fmnist-pipeline, keyed by the pinned module version and this code.
    """
    files = upstream.schema_files(name)  # checks the pin (and that there is Go) every time
    key = hashlib.sha256(
        repr((upstream.SCHEMAS[name], inspect.getsource(_strict), _CRD_PARSE)).encode()
    ).hexdigest()[:16]
    cached = _SCHEMA_CACHE / f"crd-schemas-{name}-{key}.json"
    if cached.exists():
        return {tuple(k.split(" ", 1)): v for k, v in json.loads(cached.read_text()).items()}
    schemas = {}
    for path in files:
        for doc in yaml.load_all(path.read_text(), Loader=_YAML_LOADER):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                schemas[(f"{group}/{version['name']}", kind)] = _strict(schema)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({" ".join(k): v for k, v in schemas.items()}))
    partial.replace(cached)
    return schemas


_CRD_PARSE = "openAPIV3Schema per served version, _strict"  # change to invalidate the cache


def _validator(schemas: dict[tuple[str, str], dict], where: str):
    validators = {}  # jsonschema.validate would re-check the (huge, upstream) schema each call

    def validate(obj: dict) -> None:
        key = (obj["apiVersion"], obj["kind"])
        assert key in schemas, f"no upstream CRD for {key} in {where}"
        if key not in validators:
            cls = jsonschema.validators.validator_for(schemas[key])
            validators[key] = cls(schemas[key])
        validators[key].validate(obj)

    return validate


@pytest.fixture(scope="session")
def crd_schemas() -> dict[tuple[str, str], dict]:
    """openAPIV3Schema of the newest pinned upstream CRD of each (apiVersion, kind).

    From tools/upstream.py NEWEST: Training Operator v1.9.4 (PyTorchJob), Trainer v2.3.0,
    Kueue v0.19.2, KServe v0.20.0, Katib v0.19.0, Karmada v1.18.1.
    """
    schemas = {}
    for name in upstream.NEWEST:
        schemas.update(_upstream(_load_crd_schemas, name))
    return schemas


@pytest.fixture(scope="session")
def validate_crd(crd_schemas):
    """Validate an object against its newest upstream CRD schema; raises on any violation."""
    return _validator(crd_schemas, "the newest pinned releases")


@pytest.fixture(scope="session")
def crd_schemas_at():
    """``crd_schemas_at("kserve", "v0.15.2")``: the schemas of one pinned older release.

    For versions that share apiVersion and kind with the newest (KServe v0.15.2 and
    Trainer v2.1.0, both in Kubeflow 1.11); any name in tools/upstream.py SCHEMAS works.
    """

    def schemas_at(component: str, version: str) -> dict[tuple[str, str], dict]:
        name = f"{component}@{version}"
        assert name in upstream.SCHEMAS, f"{name} is not in tools/upstream.py SCHEMAS"
        return _upstream(_load_crd_schemas, name)

    return schemas_at


@pytest.fixture(scope="session")
def validate_crd_at(crd_schemas_at):
    """``validate_crd_at("trainer", "v2.1.0")(obj)``: validate against that release's CRD."""
    cache = {}

    def validator_at(component: str, version: str):
        if (component, version) not in cache:
            schemas = crd_schemas_at(component, version)
            cache[(component, version)] = _validator(schemas, f"{component} {version}")
        return cache[(component, version)]

    return validator_at


# --- Katib (issue 5) ------------------------------------------------------------------
KATIB_OPENAPI = upstream.KATIB_OPENAPI  # (module, version, path in the module)
_TRIAL_PARAM = re.compile(r"\$\{trialParameters\..+?\}")
_META_REFERENCE = re.compile(r"\$\{trialSpec\.(Name|Namespace|Kind|APIVersion)\}")
KATIB_CONFIG = "manifests/v1beta1/installs/katib-standalone/katib-config.yaml"
MEDIANSTOP_SERVICE = "pkg/earlystopping/v1beta1/medianstop/service.py"


def _katib_file(relative: str) -> Path:
    """A file of the pinned Katib module (the OpenAPI spec's)."""
    module, version, _ = KATIB_OPENAPI
    return _upstream(upstream.module_file, module, version, relative)


@pytest.fixture(scope="session")
def katib_file():
    """``_katib_file``: a file of the pinned Katib module."""
    return _katib_file


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
    4. An ``earlyStopping``: an algorithm of katib-config's ``earlyStoppings`` (the webhook's
       ``validateEarlyStopping``), whose settings medianstop's own check accepts.
    """
    spec = json.loads(_upstream(upstream.module_file, *KATIB_OPENAPI).read_text())
    root = _strict({"$ref": "#/components/schemas/v1beta1.Experiment", **spec})
    validator = jsonschema.Draft7Validator(root)
    config = yaml.safe_load(_katib_file(KATIB_CONFIG).read_text())
    early_stoppings = {item["algorithmName"] for item in config["runtime"]["earlyStoppings"]}
    medianstop_check = _medianstop_check()

    def validate(experiment: dict) -> dict:
        validator.validate(experiment)
        _katib_webhook_rules(experiment)
        stopping = experiment["spec"].get("earlyStopping")
        if stopping is not None:
            assert stopping["algorithmName"] in early_stoppings, stopping["algorithmName"]
            settings = stopping.get("algorithmSettings", [])
            ok, message = medianstop_check([types.SimpleNamespace(**item) for item in settings])
            assert ok, message
        job = _substituted_trial(experiment)
        validate_crd(job)
        return job

    return validate


def _medianstop_check():
    """``MedianStopService.validate_medianstop_setting`` from the pinned module's source.

    The service module imports grpc and Katib's generated API, so only this function (a
    static method that uses neither) is compiled from it.
    """
    tree = ast.parse(_katib_file(MEDIANSTOP_SERVICE).read_text())
    function = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "validate_medianstop_setting"
    )
    function.decorator_list = []
    namespace: dict = {}
    exec(compile(ast.Module([function], []), MEDIANSTOP_SERVICE, "exec"), namespace)
    return namespace["validate_medianstop_setting"]


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
    ``healthz`` reports ``self.server.tag_name`` as the release, like the API server's
    hand-written handler (kubeflow/pipelines 2.15.0 ``backend/src/apiserver/main.go``:
    ``commit_sha``, ``tag_name``, ``multi_user``); each ``GET runs/<id>`` reports the next
    of ``self.server.run_states`` (the last one stays).
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
        ("GET", r"runs/(?P<run_id>[^/:]+)", "get_run"),
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
        self.server.authorizations.append(self.headers.get("Authorization"))
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
        return 200, {
            "commit_sha": "0123abc",
            "tag_name": self.server.tag_name,
            "multi_user": False,
        }

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

    def get_run(self, run_id):
        run = next((r for r in self.state["runs"] if r["run_id"] == run_id), None)
        if run is None:
            return 404, {"message": f"run {run_id} not found"}
        states = self.server.run_states
        return 200, {**run, "state": states.pop(0) if len(states) > 1 else states[0]}

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

    ``.url`` is its base URL, ``.log`` the requests it got (``.authorizations`` their
    Authorization headers), ``.state`` what it holds;
    set ``.tag_name`` (the release healthz reports, default 2.17.0) and ``.run_states``
    (what successive reads of a run say, default PENDING) before the call under test.
    """
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeKFP)
    server.log = []
    server.authorizations = []  # the Authorization header of each request in ``log``
    server.tag_name = "2.17.0"
    server.run_states = ["PENDING"]
    server.state = {"pipelines": {}, "versions": [], "experiments": [], "runs": [], "recurring": {}}
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_server():
    """A TCP listener on 127.0.0.1 that accepts every connection and never answers.

    Yields its ``http://`` URL; closing the connections at the end lets a client that
    would otherwise wait for ever see the end of the stream.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    held = []

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:  # the listener is closed
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
    listener.close()
    for connection in held:
        connection.close()


# --- fake Kubernetes API ---------------------------------------------------------------
# ``fake_k8s`` routes the ``kubernetes`` client (custom objects, core, apps, discovery and
# OpenAPI documents) to the in-memory ``tests/fake_kube.FakeCluster``.


@pytest.fixture
def fake_k8s(monkeypatch):
    """Route every kubernetes client call to an in-memory fake cluster; return it."""
    from fake_kube import FakeCluster

    from components.runtime import kube

    cluster = FakeCluster()
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", lambda: None)
    monkeypatch.setattr(kubernetes.client, "ApiClient", lambda *a, **k: cluster.api_client)
    monkeypatch.setattr(kube, "BoundedApiClient", lambda *a, **k: cluster.api_client)
    monkeypatch.setattr(kubernetes.client, "CustomObjectsApi", lambda *a, **k: cluster.custom)
    monkeypatch.setattr(kubernetes.client, "CoreV1Api", lambda *a, **k: cluster.core)
    monkeypatch.setattr(kubernetes.client, "AppsV1Api", lambda *a, **k: cluster.apps)
    return cluster


# --- compiled pipelines -----------------------------------------------------------------
# Every pipeline compiled once per test session, in both variants, with default settings
# (the pvc variant with COMPILED_STORAGE_CLASS, which it needs).
COMPILED_STORAGE_CLASS = "nfs-rwx"


@pytest.fixture(scope="session")
def packages(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """(pipeline, variant) -> its compiled YAML file."""
    from cli.compiling import compile_pipeline
    from pipelines import PIPELINES
    from pipelines.settings import VARIANTS, CompileSettings, Workspace

    out = tmp_path_factory.mktemp("compiled")
    packages = {}
    for variant in VARIANTS:
        workspace = Workspace(storage_class=COMPILED_STORAGE_CLASS if variant == "pvc" else "")
        settings = CompileSettings(workspace=workspace, variant=variant)
        for name in PIPELINES:
            packages[(name, variant)] = compile_pipeline(name, out, settings)
    return packages


@pytest.fixture(scope="session")
def compiled(packages) -> dict[tuple[str, str], list[dict]]:
    """(pipeline, variant) -> its YAML documents: the pipeline spec, the platform spec."""
    return {key: list(yaml.safe_load_all(path.read_text())) for key, path in packages.items()}
