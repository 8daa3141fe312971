#!/usr/bin/env bash
# The CustomResourceDefinitions of the custom kinds kube-reloader ships tested declarations for
# (docs/custom-kinds.md), as their projects publish them in their Go modules, copied once into
#
#   $CACHE/custom-kind-crds-<stamp>/<crd name>.yaml   (as published)
#   $CACHE/custom-kind-crds-<stamp>/<crd name>.json   (the same object, for a client without YAML)
#
# (CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}); the module zips stay in $CACHE/go.
# tests/custom_kinds.rs and the load test's custom-kind scenario create them in the cluster; the operators themselves never
# run (nothing here needs them to: kube-reloader writes the objects, their controllers would
# roll the pods).
#
# Usage: hack/custom-kind-crds.sh    prints the directory (last stdout line)
set -euo pipefail

# --- pinned versions ----------------------------------------------------------
# Knative Serving's Service (serving.knative.dev/v1): its pod template at spec.template.
KNATIVE_SERVING=knative.dev/serving@v0.51.0
# KEDA's ScaledJob (keda.sh/v1alpha1): its pod template at spec.jobTargetRef.template. v2.20.2
# is the newest that builds with Go 1.26 (v2.21 needs Go 1.27.4; only the YAML is read here).
KEDA=github.com/kedacore/keda/v2@v2.20.2

GO_BUILD_NAME=custom-kind-crds
# shellcheck source=hack/lib/go-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"

stamp=$(printf '%s\n' "$KNATIVE_SERVING" "$KEDA" json | sha256sum | cut -c1-12)
OUT=$CACHE/custom-kind-crds-$stamp
if [[ -f $OUT/.done ]]; then
    echo "$OUT"
    exit 0
fi
require_go "custom kind CRDs"
mkdir -p "$CACHE/go"
go_env

module_dir() {
    go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' ||
        die "cannot download $1 from the Go module proxy"
}

tmp=$(mktemp -d "$CACHE/custom-kind-crds.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
knative=$(module_dir "$KNATIVE_SERVING")
keda=$(module_dir "$KEDA")
cp "$knative/config/core/300-resources/service.yaml" "$tmp/services.serving.knative.dev.yaml"
cp "$keda/config/crd/bases/keda.sh_scaledjobs.yaml" "$tmp/scaledjobs.keda.sh.yaml"
# YAML to JSON offline: `kubectl patch --local` with an empty merge patch prints the object.
kubectl=$(bash "$(dirname "${BASH_SOURCE[0]}")/toolchain.sh" --bin-dir)/kubectl
for yaml in "$tmp"/*.yaml; do
    KUBECONFIG=/dev/null "$kubectl" patch --local -f "$yaml" --type merge -p '{}' -o json \
        >"${yaml%.yaml}.json" || die "converting $yaml to JSON"
done
touch "$tmp/.done"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
log "CRDs from $KNATIVE_SERVING and $KEDA in $OUT"
echo "$OUT"
