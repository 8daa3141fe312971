# Developer entry points. The control plane the integration tests run against
# is built from source and cached outside the checkout (see hack/toolchain.sh
# and hack/cluster.sh).

CACHE ?= $(HOME)/.cache/kube-reloader
export KUBE_RELOADER_CACHE := $(CACHE)

.PHONY: toolchain cluster cluster-down cluster-status kubeconfig

## Build (once) etcd, kube-apiserver, kube-controller-manager, kubectl and kwok.
toolchain:
	@bash hack/toolchain.sh >/dev/null

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
