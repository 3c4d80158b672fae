# workload-resizer: the two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST := $(PY) -m pytest

.PHONY: all venv test unit-test tools-test cluster-test test-after-unit test-installed test-1.35 test-1.37 cluster-up cluster-down demo demo-down lint helm plugin chart-lint image image-load certmanager-build certmanager-up drills drills-ci bench clean

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# Quiet unless something is wrong: pip's and setuptools' chatter goes to a log shown on failure.
	@$(PY) -m pip install --quiet --upgrade pip >$(VENV)/install.log 2>&1 && \
	 $(PY) -m pip install --quiet -e '.[test]' >>$(VENV)/install.log 2>&1 || \
	 { cat $(VENV)/install.log >&2; echo "pip install failed (log: $(VENV)/install.log)" >&2; exit 1; }
	touch $@

venv: $(VENV)/.installed

## All tests: unit tests, the tools' tests, then the cluster tests against hack/cluster (brought
## up if needed), but the installed product (test-installed: builds the image, minutes; .ci/run runs it).
test: venv
	$(PYTEST) -m "not installed" tests

## Formatting and import order (ruff format, ruff's isort rules), types (mypy: strict for the product), lint rules (ruff, also over the extensionless hack/cluster), import layers (import-linter) and the chart (helm lint --strict; helm is built once, from its Go module),
## whose every rendered object, under each value set the tests use, is checked against the OpenAPI of every minor hack/cluster pins (devkit/schemas.py: the spec from the k8s.io/kubernetes Go module, in Go's module cache).
lint: venv
	$(VENV)/bin/ruff format --check . hack/cluster hack/image hack/karpenter
	$(VENV)/bin/ruff check . hack/cluster hack/image hack/karpenter
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo
	$$(hack/tools build helm) lint --strict --quiet chart --namespace workload-resizer-system
	$(PY) -m devkit.schemas
	@unformatted="$$(gofmt -l bench/gowebhook bench/goreconciler)"; \
	  if [ -n "$$unformatted" ]; then echo "gofmt -w these Go files: $$unformatted" >&2; exit 1; fi

## Pure and fast: no cluster, no tool to build or run, no root.
unit-test: venv
	$(PYTEST) tests/unit

## Tests that build or run external tools: helm, krew and promtool (hack/tools), hadolint, pip.
tools-test: venv
	$(PYTEST) tests/tools

## Against the local control plane (and real nodes: root).
cluster-test: venv
	$(PYTEST) -m "not installed" tests/cluster

## `make test` but its unit tests (.ci/run runs those first, before any build): one session.
test-after-unit: venv
	$(PYTEST) -m "not installed" tests/tools tests/cluster

## The image built by buildah and the chart installed on real nodes (tests/cluster/test_installed.py),
## and upgraded from the last release and rolled back under bursts of pods (test_upgrade.py).
test-installed: venv
	$(PYTEST) -m installed -rP tests/cluster/test_installed.py tests/cluster/test_upgrade.py

## The cluster suite's core against another pinned minor, in its own state dir: control plane, resize
## plans, pod-level, admission sizing, the real node, and the composed matrix's core rows (all but the VPA one).
CORE_CLUSTER_TESTS := tests/cluster/test_control_plane.py tests/cluster/test_resize_plans.py \
  tests/cluster/test_pod_level_resources.py tests/cluster/test_admission_sizing.py tests/cluster/test_real_node.py \
  tests/cluster/test_composed.py tests/cluster/test_chart.py::test_server_side_dry_run --deselect tests/cluster/test_composed.py::test_07_pods_an_updating_vpa_manages_are_left_alone

## 1.35: the first GA of in-place resize. (No pytest cache: .ci/run runs both minors and the drills at once.)
test-1.35: venv
	WR_CLUSTER_DIR=$(CURDIR)/.cluster-1.35 K8S_VERSION=1.35 $(PYTEST) -p no:cacheprovider $(CORE_CLUSTER_TESTS)

## 1.37: also with KEP-5836's alpha gate on (scheduler preemption for deferred resizes).
test-1.37: venv
	WR_CLUSTER_DIR=$(CURDIR)/.cluster-1.37 K8S_VERSION=1.37 $(PYTEST) -p no:cacheprovider $(CORE_CLUSTER_TESTS) tests/cluster/test_resize_preemption.py

## Proof under faults, load and scale (issue sizes: 10k pods, 30-minute soak; each drill in its own cluster).
drills: venv
	$(PY) -m bench.drills --size full

## The same drills shrunk to fit CI.
drills-ci: venv
	$(PY) -m bench.drills --size ci

bench: venv
	$(PY) bench/webhook_bench.py --rounds 3
	$(PY) bench/reconciler_burst.py --replicas 1000

cluster-up:
	hack/cluster up

cluster-down:
	hack/cluster down

demo: venv
	$(PY) hack/demo.py

demo-down: venv
	$(PY) hack/demo.py down

helm:
	hack/tools build helm

## The admin command as a krew plugin: dist/plugin/*.tar.gz and plugins/workload-resizer.yaml (its sha256).
plugin: venv
	$(PY) hack/plugin.py

certmanager-build:
	hack/certmanager/run build

certmanager-up: cluster-up
	hack/certmanager/run install

chart-lint:
	$$(hack/tools build helm) lint --strict chart

## The image, built from the Dockerfile by buildah (Debian's; installed when missing) on a Debian base
## built locally (the public python:3.11-slim cannot be pulled here). With Docker: docker build .
IMAGE ?= workload-resizer.local/workload-resizer:dev
image:
	hack/image build --tag $(IMAGE)

## The image imported into hack/cluster's real nodes' containerd (an OCI archive; hack/cluster load-image).
image-load: image
	@archive=$$(mktemp --suffix=.oci.tar) && hack/image archive $$archive --tag $(IMAGE) >/dev/null && \
	  hack/cluster load-image $$archive; rc=$$?; rm -f $$archive; exit $$rc

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache .import_linter_cache
