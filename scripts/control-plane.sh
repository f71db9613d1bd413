#!/usr/bin/env bash
# A real Kubernetes control plane for the test suite: etcd, kube-apiserver and
# kube-controller-manager as plain processes on loopback (no kubelet, no container runtime).
# Source this file, then call `cp_start`; it exports
#
#   CONTROL_PLANE_KUBECONFIG   admin kubeconfig (system:masters, client certificate)
#   CONTROL_PLANE_SERVER       https://127.0.0.1:PORT
#   CONTROL_PLANE_AUDIT_LOG    the API server's audit log (JSON lines, one per request)
#   CONTROL_PLANE_ETCD         http://127.0.0.1:PORT (etcd's client URL, for compaction tests)
#   CONTROL_PLANE_DIR          certificates, keys, logs and data of this run
#   CONTROL_PLANE_BIN          the directory with the built binaries (kubectl included)
#   CONTROL_PLANE_READINESS    tools/readiness: kstatus and Argo CD's Lua VM, for readiness tests
#
# With CP_WORKLOADS=1, the control plane is ready for a node (scripts/node.sh) and the Pods it
# runs: the ServiceAccount and NodeRestriction admission plugins, the Node authorizer before RBAC,
# the workload, node and disruption controllers, a client certificate for kube-apiserver's calls
# to kubelets, and an egress selector that sends those calls (logs, exec, port-forward) through
# the Unix socket $CONTROL_PLANE_DIR/cluster-egress.sock, where the node listens from inside its
# network namespace. Without it only what the Kubernetes tests need runs. RBAC, the audit log and
# the other flags are the same either way.
#
# The tests run $CONTROL_PLANE_BIN/kubectl, built at the server's release; PATH is left alone (the
# local API server's tests keep the machine's kubectl). `cp_use_kubectl` puts it first on PATH
# for an interactive shell.
#
# and stops everything (and deletes the run's directory) when the calling shell exits, also
# after a failure or a signal. kube-apiserver runs under a supervisor that starts it again when it
# exits (as a kubelet does): a test kills the pid in CONTROL_PLANE_APISERVER_PIDFILE and waits for
# /readyz; `cp_restart_apiserver` does the same from the shell.
#
# The binaries are built once from Go modules pinned in tools/control-plane/ (go.mod, go.sum) and
# cached outside the clone, under a directory named after the release and a hash of go.mod and
# go.sum: ${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/control-plane/<release>-<hash>/.
# Override with CONTROL_PLANE_CACHE. Go's module and build caches are used as usual.

CP_RELEASE=v1.37.2
# Everything built from the pinned modules, in one `go build` so that the packages they share are
# compiled once: the control plane, kubectl, and the node's kubelet and kube-scheduler
# (scripts/node.sh).
CP_TOOLS="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
# --service-cluster-ip-range and its first address, the `kubernetes` Service's.
CP_SERVICE_RANGE=10.96.0.0/24
CP_SERVICE_IP=10.96.0.1
# The controllers every run starts, and those CP_WORKLOADS=1 adds for Pods on a node.
CP_CONTROLLERS=namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller,root-ca-certificate-publisher-controller
CP_WORKLOAD_CONTROLLERS=deployment-controller,replicaset-controller,job-controller,endpointslice-controller,pod-garbage-collector-controller,ttl-after-finished-controller,disruption-controller,node-lifecycle-controller,taint-eviction-controller
CP_MODULE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools/control-plane" && pwd)"
CP_READINESS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools/readiness" && pwd)"

cp_log() { echo "control-plane.sh: $*" >&2; }

cp_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $(( 20000 + RANDOM % 30000 ))
}

cp_cache_root() {
  echo "${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator}"
}

# A short hash of the files that decide what is built.
cp_hash() {
  cat "$@" | sha256sum | cut -c1-12
}

# The cache directory for the pinned binaries.
cp_cache_dir() {
  echo "$(cp_cache_root)/control-plane/$CP_RELEASE-$(cp_hash "$CP_MODULE_DIR/go.mod" "$CP_MODULE_DIR/go.sum" \
    "$CP_MODULE_DIR/etcd/main.go")"
}

# Builds tools/readiness (kstatus and gopher-lua, the readiness logic of Flux, Helm 4 and Argo CD)
# unless the cache has it; exports CONTROL_PLANE_READINESS, the binary.
cp_build_readiness() {
  local dir
  dir="$(cp_cache_root)/readiness/$(cp_hash "$CP_READINESS_DIR/go.mod" "$CP_READINESS_DIR/go.sum" \
    "$CP_READINESS_DIR/main.go")"
  mkdir -p "$dir"
  # One build at a time: two test runs starting together must not write the same .tmp file.
  (
    flock 9
    [ ! -x "$dir/readiness" ] || exit 0
    (cd "$CP_READINESS_DIR" && GOFLAGS="-mod=readonly -trimpath" GOTOOLCHAIN=local \
      go build -o "$dir/readiness.tmp" .) || { cp_log "building tools/readiness failed"; exit 1; }
    mv "$dir/readiness.tmp" "$dir/readiness"
  ) 9>"$dir.lock" || return 1
  export CONTROL_PLANE_READINESS="$dir/readiness"
}

# Builds etcd, kube-apiserver, kube-controller-manager and kubectl unless the cache has them.
cp_build() {
  if ! command -v go >/dev/null 2>&1; then
    cp_log "Go is not installed; the control plane is built from Go modules. Install Go 1.26 or newer"
    cp_log "(for example 'apt-get install golang-go' or the Go distribution) and run scripts/test.sh again"
    return 1
  fi
  CONTROL_PLANE_BIN=$(cp_cache_dir)
  local tool missing=0
  for tool in $CP_TOOLS; do
    [ -x "$CONTROL_PLANE_BIN/$tool" ] || missing=1
  done
  if [ "$missing" -eq 0 ]; then
    export CONTROL_PLANE_BIN
    cp_build_readiness
    return
  fi
  mkdir -p "$(dirname "$CONTROL_PLANE_BIN")"
  # One build at a time (two runs starting together would write the same .tmp directory); a run
  # that waited finds the binaries the other one built.
  (
    flock 9
    missing=0
    for tool in $CP_TOOLS; do
      [ -x "$CONTROL_PLANE_BIN/$tool" ] || missing=1
    done
    [ "$missing" -eq 0 ] || cp_build_locked
  ) 9>"$CONTROL_PLANE_BIN.lock" || return 1
  export CONTROL_PLANE_BIN
  cp_build_readiness
}

# The build itself; called by cp_build with its lock held.
cp_build_locked() {
  local started major minor ldflags staging
  started=$(date +%s)
  cp_log "building Kubernetes $CP_RELEASE (kube-apiserver, kube-controller-manager, kube-scheduler,"
  cp_log "kubelet, kubectl) and etcd into $CONTROL_PLANE_BIN; the first build takes a while (about 40"
  cp_log "minutes on 2 cores)"
  major=${CP_RELEASE#v}; major=${major%%.*}
  minor=${CP_RELEASE#v*.}; minor=${minor%%.*}
  ldflags="-s -w"
  # What `/version` reports and what kubectl compares for the version-skew policy.
  for staging in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $staging.gitVersion=$CP_RELEASE -X $staging.gitMajor=$major -X $staging.gitMinor=$minor"
    ldflags="$ldflags -X $staging.gitTreeState=clean -X $staging.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$CONTROL_PLANE_BIN.tmp"
  if ! (cd "$CP_MODULE_DIR" && GOFLAGS="-mod=readonly -trimpath" GOTOOLCHAIN=local \
        go build -ldflags "$ldflags" -o "$CONTROL_PLANE_BIN.tmp/" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
        k8s.io/kubernetes/cmd/kubectl ./etcd); then
    rm -rf "$CONTROL_PLANE_BIN.tmp"
    cp_log "building the control plane failed (see the go output above)"
    return 1
  fi
  rm -rf "$CONTROL_PLANE_BIN"
  mv "$CONTROL_PLANE_BIN.tmp" "$CONTROL_PLANE_BIN"
  cp_log "built in $(( $(date +%s) - started ))s"
}

# Certificates: one CA signs the API server's serving certificate and the client certificates.
cp_certs() {
  local d=$1
  (
    set -e
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=boxtable-test-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    cp_sign() { # name subject [extensions]
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -out "$1.crt" ${3:+-extfile <(printf '%s\n' "$3")} 2>/dev/null
      rm -f "$1.csr"
    }
    # The first address of --service-cluster-ip-range is the `kubernetes` Service's: Pods connect
    # to it (KUBERNETES_SERVICE_HOST).
    cp_sign apiserver "/CN=kube-apiserver" \
      "subjectAltName=IP:127.0.0.1,IP:$CP_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
    cp_sign controller-manager-serving "/CN=kube-controller-manager" \
      "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
    cp_sign admin "/O=system:masters/CN=boxtable-test-admin" "extendedKeyUsage=clientAuth"
    cp_sign controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
    # kube-apiserver's client certificate for kubelets (logs, exec, port-forward).
    cp_sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
    # Service-account token signing key.
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

cp_kubeconfig() { # file user
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: $CONTROL_PLANE_SERVER
    certificate-authority: $CONTROL_PLANE_DIR/ca.crt
users:
- name: $2
  user:
    client-certificate: $CONTROL_PLANE_DIR/$2.crt
    client-key: $CONTROL_PLANE_DIR/$2.key
contexts:
- name: test
  context: {cluster: test, user: $2}
current-context: test
EOF
}

cp_audit_policy() {
  cat >"$1" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
# One line per request, written when the response is complete.
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  users: ["system:apiserver"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version"]
- level: Metadata
EOF
}

# Waits up to $2 seconds for `curl` of $1 (with the admin client certificate) to answer "ok",
# while process $3 lives.
cp_wait_ok() {
  local url=$1 deadline=$(( $(date +%s) + $2 )) pid=$3
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    if [ "$(curl -s --max-time 5 --cacert "$CONTROL_PLANE_DIR/ca.crt" \
          --cert "$CONTROL_PLANE_DIR/admin.crt" --key "$CONTROL_PLANE_DIR/admin.key" "$url")" = ok ]; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

# What CP_WORKLOADS=1 adds to kube-apiserver (see the top of this file); sets CP_AUTHORIZATION_MODE,
# CP_ADMISSION_PLUGINS and CP_APISERVER_WORKLOAD_FLAGS.
cp_workloads_config() {
  local d=$CONTROL_PLANE_DIR
  CP_AUTHORIZATION_MODE=RBAC
  CP_ADMISSION_PLUGINS=NamespaceLifecycle
  CP_APISERVER_WORKLOAD_FLAGS=()
  [ "${CP_WORKLOADS:-}" = 1 ] || return 0
  # Kubelets are authorised by the Node authorizer (each one reads and writes only what its Pods
  # need, as system:node:NAME) and NodeRestriction; everyone else still by RBAC alone.
  CP_AUTHORIZATION_MODE=Node,RBAC
  CP_ADMISSION_PLUGINS=NamespaceLifecycle,ServiceAccount,NodeRestriction
  cat >"$d/egress-selector.yaml" <<EOF
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: $d/cluster-egress.sock
EOF
  CP_APISERVER_WORKLOAD_FLAGS=(
    --kubelet-client-certificate "$d/apiserver-kubelet-client.crt"
    --kubelet-client-key "$d/apiserver-kubelet-client.key"
    --kubelet-preferred-address-types InternalIP
    --egress-selector-config-file "$d/egress-selector.yaml"
  )
}

cp_start_etcd() {
  local d=$CONTROL_PLANE_DIR peer
  peer=$(cp_free_port)
  CP_ETCD_PORT=$(cp_free_port)
  CONTROL_PLANE_ETCD="http://127.0.0.1:$CP_ETCD_PORT"
  GOMEMLIMIT=256MiB "$CONTROL_PLANE_BIN/etcd" --name test --data-dir "$d/etcd" \
    --listen-client-urls "$CONTROL_PLANE_ETCD" --advertise-client-urls "$CONTROL_PLANE_ETCD" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "test=http://127.0.0.1:$peer" --unsafe-no-fsync --log-level warn \
    --quota-backend-bytes 4294967296 --auto-compaction-mode revision \
    --auto-compaction-retention 10000 >"$d/etcd.log" 2>&1 &
  CP_ETCD_PID=$!
  local deadline=$(( $(date +%s) + 60 ))
  until curl -s --max-time 2 "$CONTROL_PLANE_ETCD/health" | grep -q '"health":"true"'; do
    if ! kill -0 "$CP_ETCD_PID" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
      cp_log "etcd did not start; its log:"; tail -20 "$d/etcd.log" >&2
      return 1
    fi
    sleep 0.2
  done
}

# Runs kube-apiserver on CP_APISERVER_PORT, starting it again whenever it exits (as a kubelet
# restarts a static pod) until `cp_stop`; its current pid is in $CONTROL_PLANE_DIR/kube-apiserver.pid,
# so a test can kill it and wait for /readyz to see the server come back.
cp_apiserver_supervisor() {
  local d=$CONTROL_PLANE_DIR pid
  trap - EXIT HUP INT TERM
  while [ ! -e "$d/stopping" ]; do
    GOMEMLIMIT=768MiB "$CONTROL_PLANE_BIN/kube-apiserver" \
      --etcd-servers "$CONTROL_PLANE_ETCD" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$CP_APISERVER_PORT" \
      --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
      --client-ca-file "$d/ca.crt" \
      --authorization-mode "$CP_AUTHORIZATION_MODE" \
      --enable-admission-plugins "$CP_ADMISSION_PLUGINS" \
      --service-account-issuer https://kubernetes.default.svc \
      --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
      --service-cluster-ip-range "$CP_SERVICE_RANGE" --endpoint-reconciler-type none \
      --audit-policy-file "$d/audit-policy.yaml" --audit-log-path "$d/audit.log" \
      --audit-log-format json --audit-log-mode blocking --audit-log-maxsize 0 \
      "${CP_APISERVER_WORKLOAD_FLAGS[@]}" \
      --profiling=false --v 1 >>"$d/kube-apiserver.log" 2>&1 &
    pid=$!
    echo "$pid" >"$d/kube-apiserver.pid.tmp" && mv "$d/kube-apiserver.pid.tmp" "$d/kube-apiserver.pid"
    wait "$pid"
    echo "kube-apiserver (pid $pid) exited with $?" >>"$d/kube-apiserver.log"
    [ -e "$d/stopping" ] || sleep 0.5
  done
}

# Starts the supervised kube-apiserver and waits for /readyz.
cp_start_apiserver() {
  local d=$CONTROL_PLANE_DIR
  cp_apiserver_supervisor &
  CP_APISERVER_SUPERVISOR_PID=$!
  if ! cp_wait_ok "$CONTROL_PLANE_SERVER/readyz" 180 "$CP_APISERVER_SUPERVISOR_PID"; then
    cp_log "kube-apiserver did not become ready; its log:"; tail -30 "$d/kube-apiserver.log" >&2
    return 1
  fi
}

cp_start_controller_manager() {
  local d=$CONTROL_PLANE_DIR port
  port=$(cp_free_port)
  GOMEMLIMIT=256MiB "$CONTROL_PLANE_BIN/kube-controller-manager" \
    --kubeconfig "$d/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$d/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$d/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$port" --leader-elect=false \
    --tls-cert-file "$d/controller-manager-serving.crt" --tls-private-key-file "$d/controller-manager-serving.key" \
    --client-ca-file "$d/ca.crt" --authentication-skip-lookup \
    --controllers "$CP_CONTROLLERS${CP_WORKLOADS:+,$CP_WORKLOAD_CONTROLLERS}" \
    --use-service-account-credentials \
    --service-account-private-key-file "$d/sa.key" --root-ca-file "$d/ca.crt" \
    --profiling=false --v 1 >"$d/kube-controller-manager.log" 2>&1 &
  CP_CONTROLLER_MANAGER_PID=$!
  if ! cp_wait_ok "https://127.0.0.1:$port/healthz" 120 "$CP_CONTROLLER_MANAGER_PID"; then
    cp_log "kube-controller-manager did not become healthy; its log:"
    tail -30 "$d/kube-controller-manager.log" >&2
    return 1
  fi
}

# Stops kube-apiserver and waits until its supervisor has it ready again (etcd keeps the data).
cp_restart_apiserver() {
  local old
  old=$(cat "$CONTROL_PLANE_DIR/kube-apiserver.pid")
  cp_stop_pid "$old"
  cp_wait_ok "$CONTROL_PLANE_SERVER/readyz" 180 "$CP_APISERVER_SUPERVISOR_PID"
}

cp_stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cp_stop() {
  [ -n "${CP_WATCHDOG_PID:-}" ] && kill "$CP_WATCHDOG_PID" 2>/dev/null
  cp_stop_pid "${CP_CONTROLLER_MANAGER_PID:-}"
  if [ -n "${CP_APISERVER_SUPERVISOR_PID:-}" ]; then
    touch "$CONTROL_PLANE_DIR/stopping"
    cp_stop_pid "$(cat "$CONTROL_PLANE_DIR/kube-apiserver.pid" 2>/dev/null)"
    cp_stop_pid "$CP_APISERVER_SUPERVISOR_PID"
  fi
  cp_stop_pid "${CP_ETCD_PID:-}"
  CP_CONTROLLER_MANAGER_PID= CP_APISERVER_SUPERVISOR_PID= CP_ETCD_PID= CP_WATCHDOG_PID=
  if [ -n "${CONTROL_PLANE_DIR:-}" ] && [ -d "$CONTROL_PLANE_DIR" ] && [ -z "${CONTROL_PLANE_KEEP:-}" ]; then
    rm -rf "$CONTROL_PLANE_DIR"
  fi
}

# Runs cp_stop before whatever EXIT trap the shell already has (pg.sh's, for example).
cp_trap_exit() {
  local existing
  # The EXIT trap already set, unquoted (trap -p prints it quoted for eval).
  existing=$(eval "set -- $(trap -p EXIT)"; printf '%s' "${3:-}")
  # shellcheck disable=SC2064
  trap "cp_stop${existing:+; $existing}" EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# Kills the control plane if the shell that started it dies without running its EXIT trap
# (SIGKILL), so no server outlives a test run.
cp_watchdog() {
  local parent=$$ d=$CONTROL_PLANE_DIR
  local pids="$CP_ETCD_PID $CP_APISERVER_SUPERVISOR_PID $CP_CONTROLLER_MANAGER_PID"
  (
    trap - EXIT HUP INT TERM
    while kill -0 "$parent" 2>/dev/null; do sleep 2; done
    touch "$d/stopping"
    # shellcheck disable=SC2086
    kill -KILL $pids "$(cat "$d/kube-apiserver.pid" 2>/dev/null)" 2>/dev/null
    rm -rf "$d"
  ) >/dev/null 2>&1 &
  CP_WATCHDOG_PID=$!
}

# Puts the kubectl built with the server first on PATH.
cp_use_kubectl() {
  export PATH="$CONTROL_PLANE_BIN:$PATH"
}

cp_start() {
  cp_build || return 1
  local started
  started=$(date +%s%N)
  CONTROL_PLANE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-control-plane.XXXXXX")
  export CONTROL_PLANE_DIR
  cp_trap_exit
  if ! cp_certs "$CONTROL_PLANE_DIR"; then
    cp_log "could not generate certificates with openssl (apt-get install openssl)"
    return 1
  fi
  cp_audit_policy "$CONTROL_PLANE_DIR/audit-policy.yaml"
  CP_APISERVER_PORT=$(cp_free_port)
  CONTROL_PLANE_SERVER="https://127.0.0.1:$CP_APISERVER_PORT"
  CONTROL_PLANE_KUBECONFIG="$CONTROL_PLANE_DIR/admin.kubeconfig"
  CONTROL_PLANE_AUDIT_LOG="$CONTROL_PLANE_DIR/audit.log"
  cp_kubeconfig "$CONTROL_PLANE_KUBECONFIG" admin
  cp_kubeconfig "$CONTROL_PLANE_DIR/controller-manager.kubeconfig" controller-manager
  cp_workloads_config
  cp_start_etcd || return 1
  cp_start_apiserver || return 1
  cp_start_controller_manager || return 1
  cp_watchdog
  export CONTROL_PLANE_SERVER CONTROL_PLANE_KUBECONFIG CONTROL_PLANE_AUDIT_LOG CONTROL_PLANE_ETCD
  export CONTROL_PLANE_APISERVER_PIDFILE="$CONTROL_PLANE_DIR/kube-apiserver.pid"
  # For scripts/node.sh.
  export CP_APISERVER_PORT CP_SERVICE_IP CP_SERVICE_RANGE
  local ms=$(( ($(date +%s%N) - started) / 1000000 ))
  cp_log "Kubernetes $CP_RELEASE at $CONTROL_PLANE_SERVER, started in $(( ms / 1000 )).$(( ms % 1000 / 100 ))s"
}
