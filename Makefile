# `make run` and `make test` work on a fresh machine: each creates .venv when needed.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SHARED_DATA := $(abspath ../shared/data/fashion-mnist)
export FASHION_MNIST_DIR ?= $(if $(wildcard $(SHARED_DATA)/*.gz),$(SHARED_DATA),)

.PHONY: run test lint format compile images clean

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

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

compile: $(STAMP)  ## build/pipelines/<name>.yaml for every pipeline
	PATH="$(abspath $(VENV))/bin:$$PATH" ./compile.sh

images: $(STAMP)  ## the three images, named as the compiled pipeline refers to them
	for runtime in trainer serving components; do \
	  image=$$($(PY) -c "from components.images import default_image; print(default_image('$$runtime'))") && \
	  docker build -f images/$$runtime.Dockerfile -t "$$image" . || exit 1; \
	done

clean:
	rm -rf build runs .pytest_cache
