# `make run` and `make test` work on a fresh machine: each creates .venv when needed.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-soak mutants test-gpu lint format compile images clean cluster-up cluster-down test-cluster test-kfp test-model-registry test-kfp-ui test-karmada

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# kfp-server-api builds from an sdist whose setup.py imports pkg_resources.
	$(PY) -m pip install --quiet --disable-pip-version-check 'setuptools<81' wheel
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[all,test,lint]'
	touch $(STAMP)

run: $(STAMP)  ## the full pipeline, locally, on the real dataset
	$(VENV)/bin/fmnist run $(ARGS)

test: $(STAMP)  ## the whole test suite
	$(PY) -m pytest $(PYTEST_ARGS)

# The mutation check (tools/mutants.py, issue 24): ~30 one-line breaking changes, each run
# against the tests that must catch it, in a scratch copy of the checkout. Not part of
# `make test` or .ci/run: about 15 minutes on 2 CPU cores (a run trains small models).
mutants: $(STAMP)  ## fails if a mutant survives (or no longer applies); ARGS="NAME ..." picks some
	$(PY) tools/mutants.py $(ARGS)

# The soak tier (tests/soak): five whole `fmnist run`s in a row and 100,000 requests to one
# predictor, checking that nothing is left behind and nothing grows (about 5 minutes).
test-soak: $(STAMP)  ## leaks and growth over many runs; CI runs it while the cluster tier builds
	$(PY) -m pytest tests/soak -m soak $(PYTEST_ARGS)

test-gpu: $(STAMP)  ## the gpu tier alone, on a machine with a CUDA GPU
	$(PY) -m pytest tests/gpu -m gpu --confcutdir tests/gpu $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

compile: $(STAMP)  ## build/pipelines/<name>.yaml for every pipeline
	PATH="$(abspath $(VENV))/bin:$$PATH" ./compile.sh

# `make images` builds with docker where its daemon answers, else with podman: with runc
# where there is one (crun fails on hosts with hybrid cgroups), host networking, and ulimits
# under the usual hard limits (podman otherwise copies its own, which runc may not set).
# IMAGE_ARGS adds build arguments, e.g. IMAGE_ARGS="--build-arg TORCH_INDEX=https://pypi.org/simple".
# Without a registry, `tools/controlplane/cluster.py images` builds them on bases made here.
IMAGE_BUILD ?= $(if $(shell docker info >/dev/null 2>&1 && echo yes),docker build,podman \
  $(if $(shell command -v runc),--runtime $(shell command -v runc)) build --network host \
  --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

# GIT_COMMIT is the commit the images are built from (the checkout's, "+ local changes" where
# it has some), which the evaluation report names (components/runtime/commit.py).
GIT_COMMIT ?= $(shell $(PY) -c "from components.runtime.commit import SOURCE_ROOT, \
  checkout_commit; print(checkout_commit(SOURCE_ROOT) or '')")

images: $(STAMP)  ## the four images (the trainer's CUDA and CPU variants), named as the pipeline refers to them
	$(PY) -c "from components.images import BUILDS, Images; images = Images.resolve(); \
	  [print(getattr(images, r), b.dockerfile, *(f'--build-arg={k}={v}' for k, v in b.args.items())) \
	   for r, b in BUILDS.items()]" | \
	while read -r image dockerfile args; do \
	  $(IMAGE_BUILD) $(IMAGE_ARGS) --build-arg "GIT_COMMIT=$(GIT_COMMIT)" $$args \
	    -f images/$$dockerfile.Dockerfile -t "$$image" . </dev/null || exit 1; \
	done

clean:
	rm -rf build runs .pytest_cache

# The cluster test tier (docs/development.md, "Running the cluster test tier"): a real
# kube-apiserver with the Kubeflow controllers, built with Go from tools/controlplane/.
# Choose the Trainer / KServe build with e.g. `make cluster-up TRAINER=v2.1.0`.
TRAINER ?= v2.3.0
KSERVE ?= v0.15.2
CLUSTER = $(PY) tools/controlplane/cluster.py

cluster-up: $(STAMP)  ## build what is missing (cached), start the control plane, wait until ready
	$(CLUSTER) up --trainer $(TRAINER) --kserve $(KSERVE)

cluster-down: $(STAMP)  ## stop everything cluster-up started
	$(CLUSTER) down

# tools/ci/phase notes each step's wall time where $$FMNIST_PHASES names a file (.ci/run).
PHASE = tools/ci/phase

test-cluster: $(STAMP)  ## cluster-up, the `cluster` tests, then Karmada's; cluster-down (also when they fail)
	$(PHASE) "cluster up" $(CLUSTER) up --trainer $(TRAINER) --kserve $(KSERVE) && \
	  $(PHASE) "cluster tests" $(PY) -m pytest -m "cluster and not kfp and not karmada and not model_registry and not kfp_ui" tests/cluster $(PYTEST_ARGS) && \
	  $(PHASE) "Karmada up" $(CLUSTER) karmada && \
	  $(PHASE) "Karmada tests" $(PY) -m pytest -m karmada tests/cluster $(PYTEST_ARGS); \
	  status=$$?; $(PHASE) "cluster down" $(CLUSTER) down; exit $$status

test-kfp: $(STAMP)  ## the `kfp` tests, against a KFP backend attached to a running cluster
	$(PY) -m pytest -m kfp tests/cluster $(PYTEST_ARGS)

test-kfp-ui: $(STAMP)  ## the `kfp_ui` tests: the KFP UI in a browser, attached by hand beside the KFP backend
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[ui]'
	$(PY) -m pytest -m kfp_ui tests/cluster $(PYTEST_ARGS)

test-model-registry: $(STAMP)  ## the `model_registry` tests, against a Model Registry attached to a running cluster
	$(PY) -m pytest -m model_registry tests/cluster $(PYTEST_ARGS)

test-karmada: $(STAMP)  ## the `karmada` tests alone, on a running cluster (make cluster-up)
	$(CLUSTER) karmada && $(PY) -m pytest -m karmada tests/cluster $(PYTEST_ARGS)
