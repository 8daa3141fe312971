#!/usr/bin/env bash
# A real, local, loopback-only Kubernetes control plane for the integration
# tests: etcd + kube-apiserver + kube-controller-manager, built from source by
# hack/toolchain.sh. No nodes run, so pods stay Pending, but every API object
# and the controllers that reconcile them (namespaces, garbage collection,
# deployments -> replicasets -> pods, jobs, cronjobs, service accounts) are real.
#
#   hack/cluster.sh up          start (or reuse) the cluster; prints the kubeconfig path
#   hack/cluster.sh kubeconfig  same, but meant for scripts: the path is the LAST stdout line
#   hack/cluster.sh down        stop everything and delete the state dir
#   hack/cluster.sh status      show processes, ports and health (exit 1 if not healthy)
#   hack/cluster.sh env         print `export KUBECONFIG=...` and `export PATH=<bin>:$PATH`
#   hack/cluster.sh isolated    start (or reuse) a kube-apiserver on the same etcd under a key
#                               prefix of its own: an empty cluster (no CRDs, nothing of other
#                               tests) where a test may delete and install CRDs; prints its
#                               kubeconfig path (last stdout line)
#   hack/cluster.sh gateless    start (or reuse) a second kube-apiserver on the same etcd with
#                               the ShardedListAndWatch gate off (an older or unconfigured
#                               server); prints its kubeconfig path (last stdout line)
#
# All state lives in $CACHE/cluster (CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}):
# certs/, etcd/ (data), logs/, pids/, ports.env, kubeconfig. Progress goes to
# stderr; stdout only carries what callers parse.
#
# The daemons are started in their own session (setsid, stdin/stdout/stderr
# redirected) so that they outlive the shell, make or test process that ran
# `up`: tests start the cluster from one process and use it from others.
set -euo pipefail

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
STATE=$CACHE/cluster
# Sharded list and watch (KEP-5866, alpha in 1.36): the controller sends each replica's
# namespaces to the server as a shardSelector. A running control plane started with other gates
# is restarted by `up`.
APISERVER_FEATURE_GATES="ShardedListAndWatch=true"
KUBECONFIG_PATH=$STATE/kubeconfig
# The load test's controller under test (its own client cert; see write_audit_policy).
LOADTEST_USER=kube-reloader-loadtest-controller
READY_TIMEOUT=${KUBE_RELOADER_READY_TIMEOUT:-90} # seconds, for the whole start-up

# Order matters: started in this order, stopped in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager)
# Started only by `gateless` and `fresh`, stopped with the rest.
EXTRA_COMPONENTS=(kube-apiserver-gateless kube-apiserver-fresh kube-apiserver-isolated)
GATELESS_KUBECONFIG=$STATE/gateless.kubeconfig
FRESH_KUBECONFIG=$STATE/fresh.kubeconfig
ISOLATED_KUBECONFIG=$STATE/isolated.kubeconfig

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

BIN=$(bash "$HACK_DIR/toolchain.sh" --bin-dir)
KUBECTL=$BIN/kubectl

# --- process bookkeeping -----------------------------------------------------

pid_of() { cat "$STATE/pids/$1.pid" 2>/dev/null || true; }

# alive NAME: the recorded pid exists AND still runs a binary called NAME
# (guards against the pid having been reused by something else since). Only
# the basename is compared, so processes started from an older toolchain
# version are still recognised, and stopped, after a version bump.
alive() {
    local pid argv0
    pid=$(pid_of "$1")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    argv0=$(head -z -n1 "/proc/$pid/cmdline" 2>/dev/null | tr -d '\0') || return 1
    [[ ${argv0##*/} == "$(binary_of "$1")" ]]
}

# binary_of NAME: the binary a component runs (the gateless and fresh apiservers are
# kube-apiservers).
binary_of() { case $1 in kube-apiserver-*) echo kube-apiserver ;; *) echo "$1" ;; esac; }

# launch NAME ARGS...: start $BIN/NAME detached, logging to logs/NAME.log.
# The tiny bash wrapper records its own pid and then execs the binary, so the
# pid file is the daemon's pid. `9>&-` keeps the daemon from inheriting the
# lock fd (otherwise it would hold the lock forever).
launch() {
    local name=$1
    shift
    mkdir -p "$STATE/logs" "$STATE/pids"
    # shellcheck disable=SC2016 # $$ and $@ are for the inner bash
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ \
        "$STATE/pids/$name.pid" "$BIN/$(binary_of "$name")" "$@" \
        </dev/null >"$STATE/logs/$name.log" 2>&1 9>&- &
    # wait until the pid file is written (it is, almost immediately)
    local i
    for i in $(seq 50); do
        [[ -s $STATE/pids/$name.pid ]] && return 0
        sleep 0.1
    done
    die "could not start $name (no pid file)"
}

# stop_all: TERM everything recorded, then KILL what is left after a grace period.
stop_all() {
    local name pid i any all=("${COMPONENTS[@]}" "${EXTRA_COMPONENTS[@]}")
    for ((i = ${#all[@]} - 1; i >= 0; i--)); do
        name=${all[i]}
        if alive "$name"; then
            pid=$(pid_of "$name")
            log "stopping $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    for i in $(seq 50); do # up to 10 s
        any=0
        for name in "${all[@]}"; do alive "$name" && any=1; done
        ((any)) || return 0
        sleep 0.2
    done
    for name in "${all[@]}"; do
        if alive "$name"; then
            log "$name did not exit after SIGTERM; sending SIGKILL"
            kill -KILL "$(pid_of "$name")" 2>/dev/null || true
        fi
    done
    sleep 0.5
}

# fail COMPONENT MESSAGE: show that component's log tail, stop everything, exit 1.
fail() {
    local name=$1
    shift
    log "FAILED: $name: $*"
    if [[ -f $STATE/logs/$name.log ]]; then
        log "---- last 40 lines of $STATE/logs/$name.log ----"
        tail -n 40 "$STATE/logs/$name.log" >&2 || true
        log "---- end of $name log ----"
    fi
    log "(logs are kept in $STATE/logs; the processes were stopped)"
    stop_all
    exit 1
}

# --- health checks ---------------------------------------------------------------

kctl() { "$KUBECTL" --kubeconfig="$KUBECONFIG_PATH" --request-timeout=5s "$@"; }

apiserver_ready() {
    [[ -f $KUBECONFIG_PATH ]] && [[ "$(kctl get --raw=/readyz 2>/dev/null)" == ok ]]
}

# etcd_healthy PORT: plain HTTP GET /health over bash's /dev/tcp, so neither
# curl nor etcdctl is needed.
etcd_healthy() {
    local resp
    # shellcheck disable=SC2016 # $1 is for the inner bash
    resp=$(timeout 3 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
        cat <&3' _ "$1" 2>/dev/null) || return 1
    [[ $resp == *'"health":"true"'* ]]
}

all_alive() {
    local name
    for name in "${COMPONENTS[@]}"; do alive "$name" || return 1; done
}

# healthy: all processes run and /readyz says ok. If the processes run but
# /readyz does not answer at once (e.g. the apiserver is busy under a load
# test), keep asking for a while rather than tearing down a cluster that
# other test processes may be using.
healthy() {
    local i
    all_alive || return 1
    for i in $(seq 15); do
        apiserver_ready && return 0
        all_alive || return 1
        log "processes are running but /readyz is not ok yet; retrying ($i/15)"
        sleep 2
    done
    return 1
}

# --- certificates and kubeconfigs ----------------------------------------------

# All keys are RSA 2048 in PEM/PKCS#8: accepted by Go, openssl, and rustls
# (kube-rs). End-entity certs say CA:FALSE explicitly because webpki (rustls)
# rejects a CA certificate used as a server or client certificate.
gen_certs() {
    local d=$STATE/certs
    mkdir -p "$d"
    chmod 700 "$d"

    # ossl ARGS...: openssl, quiet on success, with its error shown on failure.
    ossl() {
        openssl "$@" 2>"$d/openssl.err" ||
            die "certificate generation failed: openssl $1: $(tail -n 5 "$d/openssl.err")"
    }
    # new_ca NAME CN: self-signed CA.
    new_ca() {
        ossl req -x509 -newkey rsa:2048 -nodes -keyout "$d/$1.key" -out "$d/$1.crt" -days 3650 \
            -subj "/CN=$2" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
    }
    # sign_with CA NAME SUBJECT EXTENSIONS: key + CSR + cert signed by CA.
    sign_with() {
        ossl req -new -newkey rsa:2048 -nodes -keyout "$d/$2.key" -out "$d/$2.csr" -subj "$3"
        ossl x509 -req -in "$d/$2.csr" -CA "$d/$1.crt" -CAkey "$d/$1.key" -CAcreateserial \
            -days 3650 -sha256 -out "$d/$2.crt" -extfile <(printf '%s\n' "$4")
        rm -f "$d/$2.csr"
    }
    local client_ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

    new_ca ca kube-reloader-ca
    # 10.96.0.1 is the `kubernetes` Service IP (first IP of the service range).
    sign_with ca apiserver "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:::1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    # O=system:masters = cluster-admin, bypassing RBAC (what the tests' client uses).
    sign_with ca admin "/O=system:masters/CN=kube-reloader-admin" "$client_ext"
    # The load test's controller under test: its own identity (cluster-admin too),
    # so the API server's audit log can count its requests (see write_audit_policy).
    sign_with ca loadtest-controller "/O=system:masters/CN=$LOADTEST_USER" "$client_ext"
    # The controller-manager gets its real identity, bound by the default RBAC
    # bootstrap policy, like in a kubeadm cluster.
    sign_with ca controller-manager "/CN=system:kube-controller-manager" "$client_ext"

    # Front-proxy (request-header) CA and the apiserver's proxy client cert, as
    # kubeadm sets up for the aggregation layer. Without them the
    # controller-manager keeps logging "missing content for CA bundle
    # requestheader-client-ca-file" and retrying.
    new_ca front-proxy-ca kube-reloader-front-proxy-ca
    sign_with front-proxy-ca front-proxy-client "/CN=front-proxy-client" "$client_ext"

    # Service-account token signing key pair (the apiserver signs and verifies
    # tokens, the controller-manager signs its per-controller tokens).
    ossl genrsa -out "$d/sa.key" 2048
    ossl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub"
    rm -f "$d/openssl.err"
}

# write_kubeconfig FILE USER CERTNAME PORT: credentials embedded (the *-data
# fields) so the file is self-contained and can be copied anywhere.
write_kubeconfig() {
    local file=$1 user=$2 cert=$3 port=$4 d=$STATE/certs
    (umask 077 && : >"$file") # private: it holds a cluster-admin key
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kube-reloader
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 <"$d/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$d/$cert.crt")
    client-key-data: $(base64 -w0 <"$d/$cert.key")
contexts:
- name: kube-reloader
  context:
    cluster: kube-reloader
    user: $user
    namespace: default
current-context: kube-reloader
EOF
}

# free_ports N: distinct loopback ports below the ephemeral range.
. "$HACK_DIR/lib/free-ports.sh"

# --- start-up ------------------------------------------------------------------

# wait_for COMPONENT DESCRIPTION CHECK...: poll CHECK until it succeeds, the
# component dies, or the global deadline passes.
wait_for() {
    local name=$1 what=$2
    shift 2
    while ! "$@"; do
        alive "$name" || fail "$name" "process exited while waiting for $what"
        ((SECONDS < DEADLINE)) || fail "$name" "timed out after ${READY_TIMEOUT}s waiting for $what"
        sleep 0.5
    done
}

# The audit log records the load test's controller under test only (user
# $LOADTEST_USER), at Metadata level (verb, resource, user agent, response code;
# never a request or response body, so no Secret value): the API server's own
# count of that controller's requests by user agent (loadtest/src/audit.rs).
# Everyone else (tests, kube-controller-manager, the load generator) is not
# logged, so the log costs nothing outside load tests.
write_audit_policy() {
    cat >"$STATE/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["$LOADTEST_USER"]
- level: None
EOF
}

default_sa_exists() { kctl -n default get serviceaccount default >/dev/null 2>&1; }

# launch_apiserver NAME ETCD_PORT PORT GATES [ARGS...]: a kube-apiserver on etcd at ETCD_PORT,
# with ARGS added.
launch_apiserver() {
    local name=$1 etcd_port=$2 api_port=$3 gates=$4 c=$STATE/certs
    shift 4
    local dir=$STATE/apiserver audit=$STATE/logs/audit.log
    if [[ $name != kube-apiserver ]]; then
        dir=$STATE/$name audit=$STATE/logs/$name-audit.log
    fi
    launch "$name" \
        --etcd-servers="http://127.0.0.1:$etcd_port" \
        --bind-address=127.0.0.1 \
        --advertise-address=127.0.0.1 \
        --endpoint-reconciler-type=none \
        --secure-port="$api_port" \
        --cert-dir="$dir" \
        --tls-cert-file="$c/apiserver.crt" \
        --tls-private-key-file="$c/apiserver.key" \
        --client-ca-file="$c/ca.crt" \
        --requestheader-client-ca-file="$c/front-proxy-ca.crt" \
        --requestheader-allowed-names=front-proxy-client \
        --requestheader-username-headers=X-Remote-User \
        --requestheader-group-headers=X-Remote-Group \
        --requestheader-extra-headers-prefix=X-Remote-Extra- \
        --proxy-client-cert-file="$c/front-proxy-client.crt" \
        --proxy-client-key-file="$c/front-proxy-client.key" \
        --authorization-mode=Node,RBAC \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$c/sa.pub" \
        --service-account-signing-key-file="$c/sa.key" \
        --service-cluster-ip-range=10.96.0.0/16 \
        --max-requests-inflight=800 \
        --max-mutating-requests-inflight=400 \
        --event-ttl=1h \
        --watch-cache=true \
        --audit-policy-file="$STATE/audit-policy.yaml" \
        --audit-log-path="$audit" \
        --audit-log-maxsize=500 \
        --audit-log-maxbackup=1 \
        --feature-gates="$gates" \
        --profiling=false "$@"
}

start_cluster() {
    log "starting a fresh control plane in $STATE"
    rm -rf "$STATE"
    mkdir -p "$STATE/logs" "$STATE/pids"
    local ports etcd_port peer_port api_port kcm_port
    ports=$(free_ports 4)
    read -r etcd_port peer_port api_port kcm_port <<<"$ports"
    cat >"$STATE/ports.env" <<EOF
ETCD_CLIENT_PORT=$etcd_port
ETCD_PEER_PORT=$peer_port
APISERVER_PORT=$api_port
CONTROLLER_MANAGER_PORT=$kcm_port
EOF
    gen_certs
    write_kubeconfig "$KUBECONFIG_PATH" kube-reloader-admin admin "$api_port"
    write_kubeconfig "$STATE/controller-manager.kubeconfig" system:kube-controller-manager controller-manager "$api_port"
    write_kubeconfig "$STATE/loadtest-controller.kubeconfig" "$LOADTEST_USER" loadtest-controller "$api_port"
    write_audit_policy
    local c=$STATE/certs

    SECONDS=0
    DEADLINE=$READY_TIMEOUT

    # etcd: single member, plain HTTP on loopback only. --unsafe-no-fsync: the
    # data is thrown away with the cluster, and fsync latency on a VM disk
    # would otherwise slow every API write (and the load tests) down.
    log "starting etcd on 127.0.0.1:$etcd_port"
    launch etcd \
        --name=kube-reloader \
        --data-dir="$STATE/etcd" \
        --listen-client-urls="http://127.0.0.1:$etcd_port" \
        --advertise-client-urls="http://127.0.0.1:$etcd_port" \
        --listen-peer-urls="http://127.0.0.1:$peer_port" \
        --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
        --initial-cluster="kube-reloader=http://127.0.0.1:$peer_port" \
        --initial-cluster-state=new \
        --unsafe-no-fsync=true
    wait_for etcd "etcd /health on port $etcd_port" etcd_healthy "$etcd_port"

    # kube-apiserver. RBAC is on because tests check the controller's RBAC.
    # --endpoint-reconciler-type=none: the default (lease) reconciler refuses
    # to start with a loopback advertise address ("may not be in the loopback
    # range"); it only maintains the `kubernetes` Service's endpoints, which
    # nothing uses here since no pods ever run.
    # API Priority and Fairness stays enabled (as in real clusters), but the
    # in-flight limits are raised from 400/200 so the load tests measure the
    # controller, not the apiserver's throttling of one busy test client.
    log "starting kube-apiserver on https://127.0.0.1:$api_port"
    launch_apiserver kube-apiserver "$etcd_port" "$api_port" "$APISERVER_FEATURE_GATES"
    echo "$APISERVER_FEATURE_GATES" >"$STATE/apiserver-feature-gates"
    wait_for kube-apiserver "/readyz on port $api_port" apiserver_ready
    log "kube-apiserver ready after ${SECONDS}s"

    # kube-controller-manager: all default controllers ("*"), each with its own
    # service-account credentials (as in real clusters, so RBAC applies to
    # them). Client QPS raised from 20/30 (to 500/1000) and 20 deployment workers
    # (from 5) so deployments/replicasets keep up
    # during load tests. Its own HTTPS endpoint (healthz) uses a self-signed
    # cert it generates in --cert-dir. --flex-volume-plugin-dir: the default is
    # /usr/libexec/kubernetes/..., which it would create on the host.
    log "starting kube-controller-manager"
    local kcm_kc=$STATE/controller-manager.kubeconfig
    launch kube-controller-manager \
        --kubeconfig="$kcm_kc" \
        --authentication-kubeconfig="$kcm_kc" \
        --authorization-kubeconfig="$kcm_kc" \
        --bind-address=127.0.0.1 \
        --secure-port="$kcm_port" \
        --cert-dir="$STATE/controller-manager" \
        --flex-volume-plugin-dir="$STATE/controller-manager/flexvolume" \
        --leader-elect=false \
        --controllers='*' \
        --use-service-account-credentials=true \
        --service-account-private-key-file="$c/sa.key" \
        --root-ca-file="$c/ca.crt" \
        --cluster-signing-cert-file="$c/ca.crt" \
        --cluster-signing-key-file="$c/ca.key" \
        --cluster-name=kube-reloader \
        --kube-api-qps=500 \
        --kube-api-burst=1000 \
        --concurrent-deployment-syncs=20 \
        --profiling=false
    # The `default` ServiceAccount is created by the controller-manager's
    # serviceaccount controller, so its existence proves the controllers run.
    wait_for kube-controller-manager "the default/default ServiceAccount" default_sa_exists
    log "control plane ready after ${SECONDS}s (kubeconfig: $KUBECONFIG_PATH)"
}

# --- commands ------------------------------------------------------------------

# Serialise up/down between concurrent callers (e.g. parallel test binaries all
# asking for the kubeconfig): the first one starts the cluster, the others wait
# and then reuse it.
take_lock() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.cluster.lock"
    if ! flock -n 9; then
        log "another cluster.sh is running; waiting for $CACHE/.cluster.lock"
        flock 9
    fi
}

cmd_up() {
    # Build (or just locate, when cached) the binaries first.
    bash "$HACK_DIR/toolchain.sh" >/dev/null
    take_lock
    if healthy && [[ $(cat "$STATE/apiserver-feature-gates" 2>/dev/null) != "$APISERVER_FEATURE_GATES" ]]; then
        log "the running control plane has other feature gates; restarting it"
        stop_all
    fi
    if healthy; then
        log "reusing the running control plane ($(grep APISERVER_PORT "$STATE/ports.env"))"
    else
        if [[ -d $STATE ]]; then
            log "found stale state in $STATE; cleaning up"
            stop_all
        fi
        start_cluster
    fi
    echo "$KUBECONFIG_PATH"
}

cmd_down() {
    take_lock
    if [[ -d $STATE ]]; then
        stop_all
        rm -rf "$STATE"
        log "control plane stopped, $STATE removed"
    else
        log "no control plane state in $STATE; nothing to do"
    fi
}

cmd_status() {
    local name rc=0
    if [[ ! -d $STATE ]]; then
        echo "not running (no state in $STATE)"
        return 1
    fi
    for name in "${COMPONENTS[@]}"; do
        if alive "$name"; then
            echo "$name: running (pid $(pid_of "$name"))"
        else
            echo "$name: NOT running (log: $STATE/logs/$name.log)"
            rc=1
        fi
    done
    [[ -f $STATE/ports.env ]] && sed 's/^/  /' "$STATE/ports.env"
    if apiserver_ready; then
        echo "apiserver /readyz: ok"
    else
        echo "apiserver /readyz: NOT ready"
        rc=1
    fi
    echo "kubeconfig: $KUBECONFIG_PATH"
    return $rc
}

cmd_gateless() {
    cmd_up >/dev/null
    take_lock
    if alive kube-apiserver-gateless && [[ -f $GATELESS_KUBECONFIG ]] &&
        ready_at "$GATELESS_KUBECONFIG"; then
        log "reusing the gateless kube-apiserver"
    else
        start_extra_apiserver kube-apiserver-gateless "$GATELESS_KUBECONFIG" \
            "ShardedListAndWatch=false" "gateless"
    fi
    echo "$GATELESS_KUBECONFIG"
}

# Its own key prefix in etcd: nothing the shared control plane holds (CRDs included) is seen
# there, and nothing done there is seen by other tests. No kube-controller-manager serves it.
# OwnerReferencesPermissionEnforcement (on in OpenShift): setting blockOwnerDeletion needs
# update on the owner's finalizers, as a Job created from a CronJob does.
cmd_isolated() {
    cmd_up >/dev/null
    take_lock
    if alive kube-apiserver-isolated && [[ -f $ISOLATED_KUBECONFIG ]] &&
        ready_at "$ISOLATED_KUBECONFIG"; then
        log "reusing the isolated kube-apiserver"
    else
        start_extra_apiserver kube-apiserver-isolated "$ISOLATED_KUBECONFIG" \
            "$APISERVER_FEATURE_GATES" "isolated" --etcd-prefix=/kube-reloader-isolated \
            --enable-admission-plugins=OwnerReferencesPermissionEnforcement
    fi
    echo "$ISOLATED_KUBECONFIG"
}

# A kube-apiserver on the same etcd whose watch cache starts now: a list at a resourceVersion
# older than its start is served by etcd, so after a compaction it is a 410 (the main server's
# cache may still serve it from a snapshot). Started anew on every call; `fresh-stop` stops it.
cmd_fresh() {
    cmd_up >/dev/null
    take_lock
    stop_one kube-apiserver-fresh
    start_extra_apiserver kube-apiserver-fresh "$FRESH_KUBECONFIG" "$APISERVER_FEATURE_GATES" \
        "fresh-cache"
    echo "$FRESH_KUBECONFIG"
}

# start_extra_apiserver NAME KUBECONFIG GATES WHAT [ARGS...]: a second kube-apiserver on the
# control plane's etcd, on a free port, reached through KUBECONFIG; waits until it is ready.
start_extra_apiserver() {
    local name=$1 kubeconfig=$2 gates=$3 what=$4 port
    shift 4
    # shellcheck disable=SC1091
    . "$STATE/ports.env"
    port=$(free_ports 1)
    log "starting a $what kube-apiserver on https://127.0.0.1:$port (same etcd)"
    write_kubeconfig "$kubeconfig" kube-reloader-admin admin "$port"
    SECONDS=0
    DEADLINE=$READY_TIMEOUT
    launch_apiserver "$name" "$ETCD_CLIENT_PORT" "$port" "$gates" "$@"
    wait_for "$name" "/readyz on port $port" ready_at "$kubeconfig"
    log "$what kube-apiserver ready after ${SECONDS}s"
}

ready_at() {
    [[ "$("$KUBECTL" --kubeconfig="$1" --request-timeout=5s get --raw=/readyz 2>/dev/null)" == ok ]]
}

# stop_one NAME: TERM, then KILL after 10 s.
stop_one() {
    local i
    alive "$1" || return 0
    kill -TERM "$(pid_of "$1")" 2>/dev/null || true
    for i in $(seq 50); do
        alive "$1" || return 0
        sleep 0.2
    done
    kill -KILL "$(pid_of "$1")" 2>/dev/null || true
}

cmd_env() {
    echo "export KUBECONFIG=\"$KUBECONFIG_PATH\""
    echo "export PATH=\"$BIN:\$PATH\""
}

case ${1:-} in
up) cmd_up ;;
kubeconfig) cmd_up ;; # same as up; its last stdout line is the path
down) cmd_down ;;
status) cmd_status ;;
env) cmd_env ;;
gateless) cmd_gateless ;;
isolated) cmd_isolated ;;
fresh) cmd_fresh ;;
fresh-stop) take_lock && stop_one kube-apiserver-fresh ;;
*)
    echo "usage: $0 up|down|kubeconfig|status|env|gateless|isolated|fresh|fresh-stop" >&2
    exit 2
    ;;
esac
