#!/usr/bin/env bash
# Runs stakater/Reloader's own Helm chart unit tests (helm-unittest suites) against this chart,
# the contract for "a Reloader values file works as it is" (issue #21).
#
# Reloader's tests are not part of this repository: they are read at run time from a Reloader
# git repository (RELOADER_SRC, a git dir or work tree) at a ref, written to a temporary directory
# outside the checkout together with a copy of this chart, and deleted afterwards. The only
# change made to them is the chart name in expected values: where Reloader expects its chart name
# `reloader` (alone, or as the last part of a dashed name such as `myrel-reloader`), this chart
# renders `kube-reloader`.
#
# Usage: hack/reloader-chart-tests.sh [REF]     (`make reloader-chart-tests`)
#   REF           Reloader ref to read the tests from (default chart-v<version>, the version
#                 Chart.yaml records in kube-reloader.io/reloader-chart-version, now 2.2.16)
#   RELOADER_SRC  default /work/.mirror/stakater+Reloader/repo
#   CHART_DIR     the chart to test (default: this repository's chart)
#   KEEP=1        keep the temporary directory (its path is printed)
# Prints the helm-unittest report and, last, `reloader chart tests: P/T passed`; exits 1 unless
# every test passes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RELOADER_SRC=${RELOADER_SRC:-/work/.mirror/stakater+Reloader/repo}
CHART_DIR=${CHART_DIR:-$ROOT/deployments/kubernetes/chart/kube-reloader}
TESTS_PATH=deployments/kubernetes/chart/reloader/tests

log() { printf '[reloader-chart-tests] %s\n' "$*" >&2; }
die() { printf '[reloader-chart-tests] ERROR: %s\n' "$*" >&2; exit 1; }

[[ -f $CHART_DIR/Chart.yaml ]] || die "no chart at $CHART_DIR"
matched=$(sed -nE 's/^[[:space:]]*kube-reloader\.io\/reloader-chart-version:[[:space:]]*"?([^"[:space:]]+)"?.*/\1/p' \
    "$ROOT/deployments/kubernetes/chart/kube-reloader/Chart.yaml")
REF=${1:-${REF:-chart-v${matched:?Chart.yaml has no kube-reloader.io/reloader-chart-version}}}

git -C "$RELOADER_SRC" rev-parse --verify --quiet "$REF^{commit}" >/dev/null ||
    die "no ref $REF in $RELOADER_SRC (set RELOADER_SRC to a clone of stakater/Reloader)"

UNITTEST=$(bash "$ROOT/hack/helm-unittest.sh" | tail -n1)/helm-unittest
[[ -x $UNITTEST ]] || die "helm-unittest not found at $UNITTEST"

work=$(mktemp -d "${TMPDIR:-/tmp}/reloader-chart-tests.XXXXXX")
if [[ ${KEEP:-} == 1 ]]; then
    log "keeping $work"
else
    trap 'rm -rf "$work"' EXIT
fi

# A copy of the chart, so nothing helm-unittest writes can land in the checkout.
chart=$work/$(basename "$CHART_DIR")
cp -r "$CHART_DIR" "$chart"
rm -rf "$chart/tests"
mkdir -p "$chart/tests"

name=$(sed -n 's/^name: *//p' "$chart/Chart.yaml")
mapfile -t suites < <(git -C "$RELOADER_SRC" ls-tree --name-only "$REF" "$TESTS_PATH/" | grep '_test\.yaml$')
((${#suites[@]})) || die "no *_test.yaml under $TESTS_PATH at $REF"
for suite in "${suites[@]}"; do
    git -C "$RELOADER_SRC" show "$REF:$suite" |
        sed -E "s/^([[:space:]]*value:[[:space:]]*(\"?)([A-Za-z0-9.-]*-)?)reloader(\"?)[[:space:]]*\$/\1$name\4/" \
            >"$chart/tests/$(basename "$suite")"
done
log "Reloader $REF: ${#suites[@]} suites against $CHART_DIR (chart name: $name)"

rc=0
out=$("$UNITTEST" --color=false "$chart" 2>&1) || rc=$?
printf '%s\n' "$out"

# helm-unittest's summary line: "Tests:       2 failed, 43 passed, 45 total".
summary=$(printf '%s\n' "$out" | grep -E '^Tests:' | tail -n1)
passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$summary")
total=$(sed -nE 's/.* ([0-9]+) total.*/\1/p' <<<"$summary")
[[ -n $total ]] || die "no test summary in helm-unittest's output (exit $rc)"
echo "reloader chart tests ($REF): ${passed:-0}/$total passed"
exit "$rc"
