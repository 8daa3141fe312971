# Developer entry points. The control plane the integration tests run against
# is built from source and cached outside the checkout (see hack/toolchain.sh
# and hack/cluster.sh).

CACHE ?= $(HOME)/.cache/kube-reloader
export KUBE_RELOADER_CACHE := $(CACHE)
# The cargo target dir lives outside the clone too, so CI reruns and fresh clones reuse it.
export CARGO_TARGET_DIR ?= $(CACHE)/target

.PHONY: shadow-test kind-node-image kind-cluster kind-cluster-down kind-cluster-test kind-test reloader-e2e toolchain packages cluster cluster-down cluster-status kubeconfig binary kubectl-plugin demo test loadtest-small lint loadtest chaos chaos-small chaos-short chaos-summary chaos-run manifests image image-local image-test chart-test chart-unittest reloader-chart-tests observe observe-down rules-test

## Build (once) etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, helm, and the
## observability tools prometheus, promtool, jaeger (hack/observe-tools.sh; tests/observability.rs).
toolchain:
	@bash hack/toolchain.sh >/dev/null
	@bash hack/helm.sh >/dev/null
	@bash hack/observe-tools.sh >/dev/null

## Debian packages the tests use (installed when missing and running as root).
packages:
	@bash hack/packages.sh

## Start (or reuse) the local control plane.
cluster:
	@bash hack/cluster.sh up

## Stop the control plane and delete its state.
cluster-down:
	@bash hack/cluster.sh down

cluster-status:
	@bash hack/cluster.sh status

## Print the kubeconfig path as the last line (`make -s kubeconfig`), starting the cluster if needed.
kubeconfig:
	@bash hack/cluster.sh kubeconfig

## Print (last line) the path of an up-to-date release build of kube-reloader.
binary:
	@cargo build --release --locked --bin kube-reloader >&2
	@echo $(CARGO_TARGET_DIR)/release/kube-reloader

## Link kube-reloader as the kubectl plugin `kubectl-reloader` in PLUGIN_DIR (put it on your PATH),
## so `kubectl reloader explain deployment/web` works; prints the link's path (last line).
## BIN=path links that binary instead of building a release one (tests/explain.rs does).
PLUGIN_DIR ?= $(HOME)/.local/bin
BIN ?=
kubectl-plugin:
	@[ -n "$(BIN)" ] || cargo build --release --locked --bin kube-reloader >&2
	@mkdir -p $(PLUGIN_DIR)
	@ln -sf $(or $(BIN),$(CARGO_TARGET_DIR)/release/kube-reloader) $(PLUGIN_DIR)/kubectl-reloader
	@echo $(PLUGIN_DIR)/kubectl-reloader

## Run kube-reloader against the local control plane and show a reload happening.
demo:
	@bash hack/demo.sh

## Control plane + kube-reloader + Prometheus scraping it + Jaeger receiving its traces, on
## loopback; prints the URLs and a command that makes a reload. Stays up until `make observe-down`.
observe:
	@bash hack/observe.sh up
observe-down:
	@bash hack/observe.sh down

## The alert rules (deployments/prometheus): promtool syntax check and unit tests (also in make test).
rules-test: toolchain
	@bin=$$(bash hack/observe-tools.sh --bin-dir) && \
		$$bin/promtool check rules deployments/prometheus/kube-reloader-rules.yaml && \
		$$bin/promtool test rules deployments/prometheus/kube-reloader-rules.test.yaml

## Every test: unit tests, then integration tests against the local control plane, then the
## load test's small scale (every scenario, correctness only) and the short chaos run.
test: toolchain packages
	@bash hack/cluster.sh up >/dev/null
	cargo test --locked --workspace --all-targets
	cargo test --locked --doc
	@$(MAKE) --no-print-directory image-local image-test IMAGE=localhost/kube-reloader:make-test \
		IMAGE_BINARY=$(CARGO_TARGET_DIR)/debug/kube-reloader
	@$(MAKE) --no-print-directory loadtest-small
	@$(MAKE) --no-print-directory chaos-short

## Every load-test scenario at the small scale against debug builds: asserts correctness (no
## missed, unexpected, duplicate or stale reload; the rate limit's envelope; pause semantics),
## never timings. Results go outside the clone. `--bins --tests`: the features `cargo test` built
## with (dev-dependencies), so after `make test`'s tests only the load test's own binary is
## compiled (~45 s in debug), not a second set of dependencies. The results are named by commit,
## so the directory is emptied first (one run's files, not one set per commit ever tested).
loadtest-small:
	cargo build --locked --workspace --bins --tests
	rm -rf $(CACHE)/loadtest-small
	$(CARGO_TARGET_DIR)/debug/kube-reloader-loadtest --scenario all --scale small \
		--controller-bin $(CARGO_TARGET_DIR)/debug/kube-reloader \
		--results-dir $(CACHE)/loadtest-small

## Load test against the local control plane (see loadtest/README.md):
##   make loadtest SCENARIO=steady|burst|fanout|noop|large|ratelimit|restart|annotations|sharded|churn|
##                          references|mixed|cardinality|pause|realistic|noisy-neighbour|poisoned|
##                          flapping|waves|all SCALE=small|medium|large
## CONTROLLER_CMD='...' measures another controller; LOADTEST_ARGS='...' passes more flags.
SCENARIO ?= steady
SCALE ?= small
loadtest:
	@cargo build --release --locked -p kube-reloader-loadtest >&2
	$(CARGO_TARGET_DIR)/release/kube-reloader-loadtest --scenario $(SCENARIO) --scale $(SCALE) $(LOADTEST_ARGS)

## Chaos campaign (loadtest/README.md, "chaos"): 3 sharded replicas at the medium scale for 20
## minutes under the fault schedule of the seed, kube-apiserver restarts and etcd compactions
## included. Those need a control plane of the run's own: one is started (or reused) in
## CHAOS_CACHE from a copy of the toolchain, so the shared one of `make cluster` is never
## restarted. `make chaos-small`: 3 minutes at the small scale. CHAOS_ARGS='--enable-ha' runs the
## HA variant. SEED=26 (or SEEDS="25 26 27", one run each, failing if any fails) and DURATION=5m
## choose the runs. `make test` runs `chaos-short`: 3 minutes at the small scale against the debug
## builds, for each of CHAOS_SHORT_SEEDS, asserting the checker's verdict only.
CHAOS_CACHE ?= $(HOME)/.cache/kube-reloader-chaos
CHAOS_SCALE ?= medium
CHAOS_DURATION ?= $(or $(DURATION),20m)
CHAOS_SEEDS ?= $(or $(SEEDS),$(SEED),$(CHAOS_SEED),25)
CHAOS_SHORT_SEEDS ?= 25
# The builds chaos-run uses (release for the campaign, debug for make test's short run).
CHAOS_BUILD ?= release
chaos:
	@cargo build --release --locked -p kube-reloader -p kube-reloader-loadtest >&2
	@$(MAKE) --no-print-directory chaos-run

## One markdown table over chaos result files (loadtest/README.md, "Chaos").
chaos-summary:
	@cargo build -q --locked -p kube-reloader-loadtest --bin kube-reloader-chaos-summary
	@$(CARGO_TARGET_DIR)/debug/kube-reloader-chaos-summary $(RESULTS)

chaos-small:
	@$(MAKE) --no-print-directory chaos CHAOS_SCALE=small CHAOS_DURATION=3m

## After `cargo test` built the debug binaries (`make test`); its own control plane and results
## outside the clone.
chaos-short:
	cargo build --locked --workspace --bins --tests
	rm -rf $(CACHE)/chaos-short
	@$(MAKE) --no-print-directory chaos-run CHAOS_BUILD=debug CHAOS_CACHE=$(CACHE)/chaos-plane \
		CHAOS_SCALE=small \
		CHAOS_DURATION=3m CHAOS_SEEDS="$(CHAOS_SHORT_SEEDS)" \
		CHAOS_ARGS="--results-dir $(CACHE)/chaos-short $(CHAOS_ARGS)"

chaos-run:
	@toolchain=$$(dirname "$$(bash hack/toolchain.sh)") && mkdir -p $(CHAOS_CACHE) && \
		{ [ -d "$(CHAOS_CACHE)/$$(basename "$$toolchain")" ] || \
		  cp -al "$$toolchain" $(CHAOS_CACHE)/ 2>/dev/null || cp -a "$$toolchain" $(CHAOS_CACHE)/; }
	KUBE_RELOADER_CACHE=$(CHAOS_CACHE) bash hack/cluster.sh up >/dev/null
	@bin=$(CARGO_TARGET_DIR)/$(CHAOS_BUILD); failed=""; for seed in $(CHAOS_SEEDS); do \
		$$bin/kube-reloader-loadtest --scenario chaos --scale $(CHAOS_SCALE) \
			--duration $(CHAOS_DURATION) --seed $$seed --control-plane-faults \
			--controller-bin $$bin/kube-reloader \
			--kubeconfig $(CHAOS_CACHE)/cluster/kubeconfig $(CHAOS_ARGS) || failed="$$failed $$seed"; \
	done; [ -z "$$failed" ] || { echo "chaos: failed seeds:$$failed" >&2; exit 1; }

## Regenerate deployments/kubernetes/kube-reloader.yaml and the kustomize base from the Helm
## chart's defaults (tests/chart.rs fails when they drift). Builds helm once (hack/helm.sh).
manifests:
	@bash hack/helm-manifests.sh

## The container image, named by default as a release publishes it (the chart's default image:
## values.yaml image.repository, tag Chart.yaml appVersion). `make image`: the Dockerfile, with a
## Docker engine, else podman. `make image-local`: no registry needed, FROM scratch + `make
## binary`'s build (or IMAGE_BINARY) + its shared libraries (hack/image-local.sh). `make
## image-test`: runs that image read-only, as nobody, in-cluster against the local control plane
## (tests/image.rs; podman + runc, see hack/podman.sh). `make test` builds and tests it from the
## debug binary its tests already built, saving a release build.
CHART_DIR := deployments/kubernetes/chart/kube-reloader
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' $(CHART_DIR)/Chart.yaml)
IMAGE ?= $(shell awk '/^image:/ { f = 1; next } f && /^  repository:/ { print $$2; exit }' $(CHART_DIR)/values.yaml):$(APP_VERSION)
image:
	@if docker info >/dev/null 2>&1; then set -x; docker build --build-arg VERSION=$(APP_VERSION) -t $(IMAGE) .; \
	else set -x; bash hack/podman.sh build --build-arg VERSION=$(APP_VERSION) -t $(IMAGE) .; fi

image-local:
	@bin="$(IMAGE_BINARY)"; [ -n "$$bin" ] || bin=$$($(MAKE) -s --no-print-directory binary | tail -n1); \
		bash hack/image-local.sh "$$bin" $(IMAGE) $(APP_VERSION)

image-test:
	@bash hack/cluster.sh up >/dev/null
	KUBE_RELOADER_IMAGE=$(IMAGE) cargo test --locked --test image -- --nocapture

## Real nodes (issue #39, loadtest/kind/README.md). `make kind-node-image`: a kind node image
## built offline (Debian packages + Go modules, hack/kind-node.sh), cached in $(CACHE)/kind-node.
## `make kind-cluster`: a kind cluster under podman, 1 control plane + KIND_WORKERS (2) workers
## (hack/kind-cluster.sh; last line: its kubeconfig); `make kind-cluster-down` deletes it.
## `make kind-cluster-test`: the cluster's smoke test (pods Ready, a pod reaches a Service by
## name). `make kind-test`: the reload end to end on real pods, kube-reloader and stakater/Reloader
## side by side (hack/kind-test.sh; RELOADER_SRC=<Reloader clone>, CHANGES=10 per strategy).
## Not part of `make test` (see loadtest/kind/README.md for its run time).
kind-node-image: packages
	@bash hack/kind-node.sh
kind-cluster: packages
	@bash hack/kind-cluster.sh up
kind-cluster-down:
	@bash hack/kind-cluster.sh down
kind-cluster-test: packages
	@SMOKE_ONLY=1 bash hack/kind-test.sh
kind-test: packages
	@bash hack/kind-test.sh

## Shadow mode beside stakater/Reloader (tests/shadow.rs): Reloader built once from a Reloader
## git repository (hack/reloader-binary.sh; RELOADER_SRC=<git dir>, RELOADER_REF=<ref>, default
## v1.4.21), then the side-by-side scenario under both strategies on the local control plane.
## Its own target: `make test` runs the same scenario beside kube-reloader, needing no Reloader.
shadow-test: toolchain packages
	@bash hack/cluster.sh up >/dev/null
	@bin=$$(RELOADER_SRC="$(RELOADER_SRC)" bash hack/reloader-binary.sh $(or $(RELOADER_REF),v1.4.21) | tail -n1) && \
		RELOADER_BIN=$$bin cargo test --locked --test shadow -- --ignored --nocapture

## Only the chart and RBAC tests: helm lint/template, server-side dry run, least privilege per mode.
chart-test: toolchain packages
	@bash hack/cluster.sh up >/dev/null
	cargo test --locked --test chart --test rbac

## This chart's own helm-unittest suites (deployments/kubernetes/chart/kube-reloader/tests).
chart-unittest:
	@bin=$$(bash hack/helm-unittest.sh | tail -n1); "$$bin/helm-unittest" --color=false deployments/kubernetes/chart/kube-reloader

## stakater/Reloader's own chart unit tests (helm-unittest, built once by hack/helm-unittest.sh)
## against this chart, read at run time from a Reloader git repository (never copied here):
##   make reloader-chart-tests [RELOADER_SRC=<git dir>] [RELOADER_REF=<ref>]
## (default ref: chart-v<the version in Chart.yaml's kube-reloader.io/reloader-chart-version>)
RELOADER_REF ?=
reloader-chart-tests:
	@RELOADER_SRC="$(RELOADER_SRC)" bash hack/reloader-chart-tests.sh $(RELOADER_REF)

## stakater/Reloader's own e2e suite (its test/e2e, Ginkgo) against kube-reloader: Reloader's chart
## with kube-reloader's image (`make image-local`'s, from this checkout) on the kind cluster of
## `make kind-cluster`, run from the source hack/reloader-binary.sh exports (never copied here);
## labels needing Argo Rollouts, the CSI driver or OpenShift left out (hack/reloader-e2e.sh).
##   make reloader-e2e [RELOADER_SRC=<git dir>] [RELOADER_REF=<ref>, default v1.4.21]
reloader-e2e: packages
	@RELOADER_SRC="$(RELOADER_SRC)" RELOADER_REF=$(or $(RELOADER_REF),v1.4.21) bash hack/reloader-e2e.sh

## What CI checks besides the tests.
lint:
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets --test image -- -D warnings
	"$$(bash hack/actionlint.sh)/actionlint"
