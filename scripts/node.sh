#!/usr/bin/env bash
# A real Kubernetes node for the test suite: kubelet, containerd and runc running Pods, next to
# the control plane of scripts/control-plane.sh. Source both files, then call `cp_start` with
# CP_WORKLOADS=1 and `node_start`; it exports
#
#   NODE_NAME                  the Node's name (boxtable-node)
#   NODE_IP                    its InternalIP, inside its network namespace
#   NODE_DIR                   configuration, logs and state of this run
#   NODE_PID                   the pid (on the host) of the first process of the node's namespaces:
#                              `nsenter --target $NODE_PID --net --mount` enters them
#   NODE_BIN                   containerd, ctr and runc (from Debian's packages)
#   NODE_CONTAINERD_ADDRESS    containerd's socket: `$NODE_BIN/ctr --address ... -n k8s.io images import`
#                              loads an image the Pods run with `imagePullPolicy: Never`
#   NODE_POSTGRES              HOST:PORT where Pods reach the PostgreSQL of $DATABASE_URL (when
#                              that is on the host's loopback)
#   NODE_BUSYBOX_IMAGE         a small application image (busybox), already loaded
#   NODE_HOST_BEFORE           which of the paths the kubelet, containerd and libcni write by
#                              default existed on the host before the node started, one a line
#
# and stops everything (and deletes the run's directory) when the calling shell exits, also after
# a failure or a signal; it then checks that nothing of the node is left on the host and fails
# the run, saying what, if something is.
#
# The node lives in namespaces of its own: a network namespace with loopback only (the node's
# address and the `kubernetes` Service's address are /32 addresses on its `lo`; Pods hang off a
# bridge in it), so nothing the node or a Pod sends can leave the machine; a mount namespace in
# which /run is a fresh tmpfs and /var/lib and /var/log are overlays whose writes land in
# $NODE_DIR (the kubelet, libcni and containerd write a few fixed paths there whatever their
# flags say), and in which the kernel settings the kubelet insists on read as it wants them
# (files mounted over their /proc/sys entries; the host's are never written); and a PID
# namespace, so that when its first process ends the kernel ends every process of the node. The
# only ways in and out are Unix sockets in $NODE_DIR and $CONTROL_PLANE_DIR: scripts/node-forward.py
# listens on one side and connects on the other, for the API server (the kubelet and Pods connect
# to 127.0.0.1:PORT and to the `kubernetes` Service inside the namespace), for PostgreSQL
# ($NODE_POSTGRES) and, the other way, for kube-apiserver's calls to the kubelet (`kubectl logs`,
# `exec`, `port-forward`: its egress selector's HTTP CONNECT proxy, which opens connections only
# to the node and its Pods). kube-scheduler runs on the host's loopback, beside the control plane.
# Pods get cgroups under /<NODE_DIR's name> in each cgroup hierarchy, removed at the end.
#
# kubelet and kube-scheduler come from the control plane's build (CP_TOOLS); containerd, runc and
# the CNI plugins from Debian's packages (containerd, runc, containernetworking-plugins), unpacked
# into a cache with dpkg-deb, as is busybox-static for the application image; the pause image is
# built from the pause.c that ships in the k8s.io/kubernetes module (gcc -static). The cache is
# ${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/node/<hash>/, named after the packages, pause.c
# and this file's build steps (its `versions` file lists the packages' versions; delete the
# directory to take newer ones). It needs root (namespaces, mounts, cgroups), cgroup v1
# (as the machines CI runs on have), overlayfs, util-linux (unshare, nsenter), iproute2, python3
# and, for the first build, gcc.

NODE_SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
NODE_FORWARD="$(dirname "$NODE_SCRIPT")/node-forward.py"
NODE_NAME=boxtable-node
NODE_IP=10.250.0.1
NODE_POD_CIDR=10.244.0.0/24
NODE_POD_GATEWAY=10.244.0.1
NODE_POSTGRES_PORT=5432
NODE_PACKAGES="containerd runc containernetworking-plugins busybox-static"
NODE_PAUSE_IMAGE=localhost/boxtable-node/pause:3.10.2
NODE_BUSYBOX_IMAGE=localhost/boxtable-node/busybox:1.35
# The kernel settings the kubelet checks (it would write the host's otherwise), with the values it wants.
NODE_SYSCTLS="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"
# Paths on the host that the kubelet, containerd or libcni write by default: a run must leave
# each as it found it (they are overlays or tmpfs inside the node's mount namespace).
NODE_HOST_PATHS="/var/lib/kubelet /var/lib/cni /var/lib/containerd /var/log/pods /var/log/containers
/run/containerd /run/netns /run/kubernetes /opt/containerd /opt/cni /etc/cni /etc/containerd /etc/kubernetes"

node_log() { echo "node.sh: $*" >&2; }

# Fails with one line: what went wrong and how to fix it.
node_fail() {
  node_log "$*"
  return 1
}

node_cache_root() {
  echo "${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator}"
}

# The candidate version of Debian package $1 (apt-get update once when apt knows none).
node_deb_version() {
  local version
  version=$(apt-cache show --no-all-versions "$1" 2>/dev/null | awk '$1 == "Version:" { print $2; exit }')
  if [ -z "$version" ] && [ -z "${NODE_APT_UPDATED:-}" ]; then
    NODE_APT_UPDATED=1
    apt-get update -qq >&2 || true
    version=$(apt-cache show --no-all-versions "$1" 2>/dev/null | awk '$1 == "Version:" { print $2; exit }')
  fi
  echo "$version"
}

# Everything that decides what the cache holds, one line each: the packages (whichever version
# apt offers when the cache is built; the cache's `versions` file names them), pause.c and the build
# steps. (Not the versions themselves: asking apt takes seconds on a loaded machine, on every run.)
node_recipe() {
  echo "$NODE_PACKAGES"
  local pause
  pause=$(node_pause_source) || return 1
  sha256sum "$pause" | cut -c1-64
  declare -f node_build_locked node_image_tar
}

# pause.c from the k8s.io/kubernetes module the control plane is built from (downloaded into Go's
# module cache by the control plane's build, or now).
node_pause_source() {
  local version file
  version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$CP_MODULE_DIR/go.mod")
  file="$(cd "$CP_MODULE_DIR" && go env GOMODCACHE)/k8s.io/kubernetes@$version/build/pause/linux/pause.c"
  [ -e "$file" ] || (cd "$CP_MODULE_DIR" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local go mod download k8s.io/kubernetes) >&2
  [ -e "$file" ] || { node_fail "no $file: the k8s.io/kubernetes module could not be downloaded (go mod download k8s.io/kubernetes in tools/control-plane)"; return 1; }
  echo "$file"
}

# Builds the cache (packages unpacked, pause and busybox images) unless it is there; sets NODE_CACHE.
node_build() {
  local recipe
  recipe=$(node_recipe) || return 1
  NODE_CACHE="$(node_cache_root)/node/$(echo "$recipe" | sha256sum | cut -c1-12)"
  NODE_BIN="$NODE_CACHE/bin"
  [ -e "$NODE_CACHE/complete" ] && return 0
  mkdir -p "$(dirname "$NODE_CACHE")"
  (
    flock 9
    [ -e "$NODE_CACHE/complete" ] || node_build_locked
  ) 9>"$NODE_CACHE.lock" || return 1
}

# Writes a `docker save` tarball $3 holding image $1, one layer with the files of directory $2
# and the configuration $4 (JSON members: Entrypoint, Cmd, Env).
node_image_tar() {
  local name=$1 rootfs=$2 out=$3 config=$4 work digest arch
  work=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-node-image.XXXXXX")
  tar --create --file "$work/layer.tar" --directory "$rootfs" --sort=name --owner 0 --group 0 \
    --numeric-owner --mtime @0 . || { rm -rf "$work"; return 1; }
  digest=$(sha256sum "$work/layer.tar" | cut -c1-64)
  arch=$(dpkg --print-architecture)
  printf '{"architecture":"%s","os":"linux","config":{%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$arch" "$config" "$digest" >"$work/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$name" >"$work/manifest.json"
  tar --create --file "$out" --directory "$work" manifest.json config.json layer.tar
  local status=$?
  rm -rf "$work"
  return $status
}

# The build itself; called by node_build with its lock held.
node_build_locked() {
  local started tmp pkg version versions='' deb debs missing
  started=$(date +%s)
  tmp="$NODE_CACHE.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp/unpacked" "$tmp/bin" "$tmp/cni" "$tmp/images"
  debs="$(node_cache_root)/debs"
  mkdir -p "$debs"
  for pkg in $NODE_PACKAGES; do
    version=$(node_deb_version "$pkg")
    [ -n "$version" ] || { node_fail "apt knows no package $pkg: run apt-get update (Debian 12's main archive has it)"; return 1; }
    versions="$versions$pkg $version
"
    deb="$debs/${pkg}_${version//:/%3a}_$(dpkg --print-architecture).deb"
    if [ ! -s "$deb" ]; then
      # As root, apt would hand the download to its unprivileged _apt user, who cannot write here.
      (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$version" >&2) \
        || { node_fail "apt-get download $pkg=$version failed: check the machine's apt sources (apt-get update)"; return 1; }
      mv "$tmp/${pkg}_${version//:/%3a}_$(dpkg --print-architecture).deb" "$deb"
    fi
    dpkg-deb --extract "$deb" "$tmp/unpacked" || { node_fail "dpkg-deb could not unpack $deb: delete it and run again"; return 1; }
  done
  cp "$tmp/unpacked/usr/bin/containerd" "$tmp/unpacked/usr/bin/containerd-shim-runc-v2" \
    "$tmp/unpacked/usr/bin/ctr" "$tmp/unpacked/usr/sbin/runc" "$tmp/bin/"
  cp "$tmp/unpacked/usr/lib/cni/bridge" "$tmp/unpacked/usr/lib/cni/host-local" \
    "$tmp/unpacked/usr/lib/cni/loopback" "$tmp/cni/"
  missing=$(ldd "$tmp"/bin/* "$tmp"/cni/* 2>/dev/null | awk '/not found/ { print $1 }' | sort -u | tr '\n' ' ')
  [ -z "$missing" ] || { node_fail "containerd or runc needs libraries the machine lacks ($missing): install them with apt-get (runc needs libseccomp2)"; return 1; }

  command -v gcc >/dev/null || { node_fail "gcc is missing; the pause image is built from source: apt-get install gcc libc6-dev"; return 1; }
  mkdir -p "$tmp/pause"
  gcc -Os -Wall -Werror -static -DVERSION=v3.10.2-boxtable -o "$tmp/pause/pause" "$(node_pause_source)" \
    || { node_fail "gcc -static could not build pause.c: apt-get install gcc libc6-dev"; return 1; }
  node_image_tar "$NODE_PAUSE_IMAGE" "$tmp/pause" "$tmp/images/pause.tar" '"Entrypoint":["/pause"]' || return 1

  mkdir -p "$tmp/busybox/bin"
  cp "$tmp/unpacked/bin/busybox" "$tmp/busybox/bin/busybox"
  for pkg in sh cat env id ls nc sleep true wget; do ln -s busybox "$tmp/busybox/bin/$pkg"; done
  node_image_tar "$NODE_BUSYBOX_IMAGE" "$tmp/busybox" "$tmp/images/busybox.tar" \
    '"Cmd":["sh"],"Env":["PATH=/bin"]' || return 1

  rm -rf "$tmp/unpacked" "$tmp/pause" "$tmp/busybox"
  printf '%s' "$versions" >"$tmp/versions"
  touch "$tmp/complete"
  rm -rf "$NODE_CACHE"
  mv "$tmp" "$NODE_CACHE"
  node_log "unpacked containerd, runc and the CNI plugins and built the pause and busybox images into $NODE_CACHE in $(( $(date +%s) - started ))s"
}

# What the node needs from the machine; one line naming what is missing and how to get it.
node_preflight() {
  local tool
  [ "$(id -u)" -eq 0 ] || { node_fail "the node needs root (namespaces, mounts, cgroups): run scripts/test.sh as root, as CI does"; return 1; }
  for tool in unshare nsenter mount flock; do
    command -v "$tool" >/dev/null || { node_fail "$tool is missing: apt-get install util-linux mount"; return 1; }
  done
  command -v ip >/dev/null || { node_fail "ip is missing: apt-get install iproute2"; return 1; }
  command -v python3 >/dev/null || { node_fail "python3 is missing (the node's forwarders): apt-get install python3"; return 1; }
  command -v apt-cache >/dev/null || { node_fail "apt is missing: containerd, runc and the CNI plugins come from Debian's packages"; return 1; }
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null
  grep -qw overlay /proc/filesystems || { node_fail "the kernel has no overlayfs (containerd's snapshotter and the node's /var overlays need it): load the overlay module"; return 1; }
  for tool in cpu cpuacct cpuset memory pids; do
    [ -e "/sys/fs/cgroup/$tool/cgroup.procs" ] \
      || { node_fail "no cgroup v1 $tool hierarchy at /sys/fs/cgroup/$tool: the node runs Pods with the kubelet's cgroupfs driver on cgroup v1, as the machines CI runs on have"; return 1; }
  done
  [ -e "${CONTROL_PLANE_DIR:-}/egress-selector.yaml" ] \
    || { node_fail "the control plane was not started for a node: set CP_WORKLOADS=1 before cp_start"; return 1; }
  for tool in kubelet kube-scheduler kubectl; do
    [ -x "$CONTROL_PLANE_BIN/$tool" ] || { node_fail "$CONTROL_PLANE_BIN has no $tool: delete that directory and run again (cp_build builds $CP_TOOLS)"; return 1; }
  done
}

# Every cgroup hierarchy's mount point (v1 and the unified one).
node_cgroup_mounts() {
  awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo
}

# Client certificates for the kubelet and kube-scheduler, signed by the control plane's CA.
node_certs() {
  local d=$NODE_DIR ca=$CONTROL_PLANE_DIR
  (
    set -e
    sign() { # name subject
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
      openssl x509 -req -in "$d/$1.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial \
        -CAserial "$d/ca.srl" -days 3650 -out "$d/$1.crt" -extfile <(echo "extendedKeyUsage=clientAuth") 2>/dev/null
      rm -f "$d/$1.csr"
    }
    sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
    sign scheduler "/CN=system:kube-scheduler"
  )
}

node_kubeconfig() { # file user server
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: $3
    certificate-authority: $CONTROL_PLANE_DIR/ca.crt
users:
- name: $2
  user:
    client-certificate: $NODE_DIR/$2.crt
    client-key: $NODE_DIR/$2.key
contexts:
- name: test
  context: {cluster: test, user: $2}
current-context: test
EOF
}

node_configs() {
  local d=$NODE_DIR
  mkdir -p "$d/cni" "$d/kubelet" "$d/pod-logs" "$d/sysctl" "$d/overlay"
  node_kubeconfig "$d/kubelet.kubeconfig" kubelet "$CONTROL_PLANE_SERVER"
  node_kubeconfig "$d/scheduler.kubeconfig" scheduler "$CONTROL_PLANE_SERVER"
  cat >"$d/containerd.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$d/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$NODE_PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE on these machines: a negative oom_score_adj would fail every container.
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$NODE_BIN/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$NODE_CACHE/cni"
    conf_dir = "$d/cni"
EOF
  cat >"$d/cni/10-boxtable-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "boxtable-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$NODE_POD_GATEWAY"}]],
        "dataDir": "$d/cni-ipam"
      }
    }
  ]
}
EOF
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$d/containerd.sock
imageServiceEndpoint: unix://$d/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CONTROL_PLANE_DIR/ca.crt}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: /$NODE_CGROUP
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failCgroupV1: false
podLogsDir: $d/pod-logs
protectKernelDefaults: true
makeIPTablesUtilChains: false
hairpinMode: none
resolvConf: ""
oomScoreAdj: 0
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
address: $NODE_IP
port: 10250
# Images are loaded by the tests, never pulled: none may be collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
maxPods: 60
serializeImagePulls: false
shutdownGracePeriod: 0s
EOF
}

# Runs inside the node's namespaces (`scripts/node.sh __inside DIR`, started by node_start as the
# PID namespace's first process): mounts, addresses, forwarders, containerd, then the kubelet.
node_inside() {
  local d=$1 entry name value dir kubelet_pid containerd_pid forward_pid
  # shellcheck disable=SC1091
  . "$d/env"
  set -e
  # /run: containerd's shims and runc state, CNI's network namespaces. /var/lib and /var/log:
  # the kubelet's device-plugins socket, libcni's results, the kubelet's /var/log/containers.
  mount -t tmpfs -o mode=0755,size=256m boxtable-node-run /run
  for dir in /var/lib /var/log; do
    name=${dir//\//-}
    mkdir -p "$d/overlay/upper$name" "$d/overlay/work$name"
    mount -t overlay boxtable-node"$name" \
      -o "lowerdir=$dir,upperdir=$d/overlay/upper$name,workdir=$d/overlay/work$name" "$dir"
  done
  for entry in $NODE_SYSCTLS; do
    name=${entry%%=*} value=${entry#*=}
    echo "$value" >"$d/sysctl/${name//\//.}"
    mount --bind "$d/sysctl/${name//\//.}" "/proc/sys/$name"
  done
  ip link set lo up
  ip addr add "$NODE_IP/32" dev lo
  ip addr add "$CP_SERVICE_IP/32" dev lo
  local forwards=("tcp:127.0.0.1:$CP_APISERVER_PORT=unix:$d/apiserver.sock"
    "tcp:$CP_SERVICE_IP:443=unix:$d/apiserver.sock"
    "unix:$CONTROL_PLANE_DIR/cluster-egress.sock=connect:$NODE_IP/32,$NODE_POD_CIDR")
  [ -z "${NODE_POSTGRES:-}" ] || forwards+=("tcp:$NODE_POSTGRES=unix:$d/postgres.sock")
  python3 "$NODE_FORWARD" "$d/forward-node.ready" "${forwards[@]}" >>"$d/forward-node.log" 2>&1 &
  forward_pid=$!
  PATH="$NODE_BIN:$PATH" "$NODE_BIN/containerd" --config "$d/containerd.toml" >"$d/containerd.log" 2>&1 &
  containerd_pid=$!
  trap 'kill -TERM $kubelet_pid 2>/dev/null; wait $kubelet_pid; kill -TERM $containerd_pid $forward_pid 2>/dev/null; wait; exit 0' TERM
  until "$NODE_BIN/ctr" --address "$d/containerd.sock" version >/dev/null 2>&1; do
    kill -0 "$containerd_pid" 2>/dev/null || { echo "containerd exited" >>"$d/inside.log"; exit 1; }
    sleep 0.1
  done
  "$NODE_BIN/ctr" --address "$d/containerd.sock" -n k8s.io images import "$NODE_CACHE/images/pause.tar" >/dev/null
  "$NODE_BIN/ctr" --address "$d/containerd.sock" -n k8s.io images import "$NODE_CACHE/images/busybox.tar" >/dev/null
  # SIGUSR1 (SIGTERM to the kubelet) or SIGUSR2 (SIGKILL) asks for a kubelet restart:
  # node_restart_kubelet. Pods and containers run on (containerd keeps them); the new kubelet
  # takes them over. $d/kubelet.starts counts the kubelets started.
  restart=
  trap 'restart=1; kill -TERM $kubelet_pid 2>/dev/null' USR1
  trap 'restart=1; kill -KILL $kubelet_pid 2>/dev/null' USR2
  set +e
  local starts=0 status
  while :; do
    "$CONTROL_PLANE_BIN/kubelet" --config "$d/kubelet.yaml" --kubeconfig "$d/kubelet.kubeconfig" \
      --root-dir "$d/kubelet" --cert-dir "$d/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
      --v 1 >>"$d/kubelet.log" 2>&1 &
    kubelet_pid=$!
    starts=$((starts + 1))
    echo "$starts" >"$d/kubelet.starts"
    # Whichever ends first, unasked, ends the node (and so, with this process, every process in it).
    while :; do
      wait -n "$kubelet_pid" "$containerd_pid" "$forward_pid"
      status=$?
      [ -n "$restart" ] || break 2
      # Asked: the kubelet ends (a signal may have interrupted the wait before it did), the others
      # must still run.
      while kill -0 "$kubelet_pid" 2>/dev/null; do sleep 0.05; done
      kill -0 "$containerd_pid" 2>/dev/null && kill -0 "$forward_pid" 2>/dev/null || break 2
      restart=
      echo "kubelet restarted on request" >>"$d/inside.log"
      break
    done
  done
  echo "a node process exited ($status)" >>"$d/inside.log"
  exit 1
}

# Waits for file $1 while process $2 lives, up to $3 seconds.
node_wait_file() {
  local deadline=$(( $(date +%s) + $3 ))
  until [ -e "$1" ]; do
    kill -0 "$2" 2>/dev/null || return 1
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

node_kubectl() {
  "$CONTROL_PLANE_BIN/kubectl" --kubeconfig "$CONTROL_PLANE_KUBECONFIG" "$@"
}

# Prints the last lines of the node's logs (after a failure).
node_show_logs() {
  local f
  for f in inside forward-host forward-node containerd kubelet kube-scheduler; do
    [ -s "$NODE_DIR/$f.log" ] || continue
    node_log "--- $f.log:"
    tail -15 "$NODE_DIR/$f.log" >&2
  done
}

node_start() {
  local started since
  [ -n "${CONTROL_PLANE_DIR:-}" ] || { node_fail "node_start needs the control plane: call cp_start (with CP_WORKLOADS=1) first"; return 1; }
  node_preflight || return 1
  since=$(date +%s%N)
  node_build || return 1
  local built=$(( ($(date +%s%N) - since) / 1000000 ))
  started=$(date +%s%N)
  NODE_HOST_BEFORE=$(for p in $NODE_HOST_PATHS; do if [ -e "$p" ]; then echo "$p"; fi; done)
  NODE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-node.XXXXXX")
  NODE_CGROUP=$(basename "$NODE_DIR")
  node_trap_exit
  export NODE_DIR NODE_NAME NODE_IP NODE_BIN NODE_BUSYBOX_IMAGE NODE_HOST_BEFORE
  export NODE_CONTAINERD_ADDRESS="$NODE_DIR/containerd.sock"
  node_certs || { node_fail "could not sign the node's certificates with openssl (apt-get install openssl)"; return 1; }
  # Pods reach the suite's PostgreSQL at the node's address when it listens on the host's loopback.
  NODE_POSTGRES='' NODE_PG_TARGET=''
  local pg_port
  pg_port=$(python3 -c 'import sys, urllib.parse as u; p = u.urlparse(sys.argv[1]); print(p.port or 5432 if p.hostname in ("127.0.0.1", "localhost") else "")' "${DATABASE_URL:-}" 2>/dev/null)
  if [ -n "$pg_port" ]; then
    NODE_POSTGRES="$NODE_IP:$NODE_POSTGRES_PORT"
    NODE_PG_TARGET="127.0.0.1:$pg_port"
    export NODE_POSTGRES
  fi
  node_configs
  # The cgroup each hierarchy gives the node's Pods (the kubelet's cgroupRoot must exist).
  local mnt
  for mnt in $(node_cgroup_mounts); do
    mkdir -p "$mnt/$NODE_CGROUP"
    if [ -e "$mnt/cpuset.cpus" ]; then
      cat "$mnt/cpuset.cpus" >"$mnt/$NODE_CGROUP/cpuset.cpus"
      cat "$mnt/cpuset.mems" >"$mnt/$NODE_CGROUP/cpuset.mems"
    fi
  done
  {
    declare -p NODE_DIR NODE_CACHE NODE_BIN NODE_CGROUP NODE_POSTGRES CONTROL_PLANE_DIR CONTROL_PLANE_BIN \
      CP_APISERVER_PORT CP_SERVICE_IP
  } | sed 's/^declare -[a-z-]* //' >"$NODE_DIR/env"
  # The host's end of the Unix sockets.
  local forwards=("unix:$NODE_DIR/apiserver.sock=tcp:127.0.0.1:$CP_APISERVER_PORT")
  [ -z "$NODE_PG_TARGET" ] || forwards+=("unix:$NODE_DIR/postgres.sock=tcp:$NODE_PG_TARGET")
  python3 "$NODE_FORWARD" "$NODE_DIR/forward-host.ready" "${forwards[@]}" >"$NODE_DIR/forward-host.log" 2>&1 &
  NODE_FORWARD_PID=$!
  node_wait_file "$NODE_DIR/forward-host.ready" "$NODE_FORWARD_PID" 30 \
    || { node_show_logs; node_fail "the host's forwarder did not start (see forward-host.log above)"; return 1; }
  unshare --pid --fork --kill-child --mount --net --propagation private --mount-proc \
    bash "$NODE_SCRIPT" __inside "$NODE_DIR" >"$NODE_DIR/inside.log" 2>&1 &
  NODE_UNSHARE_PID=$!
  node_watchdog
  # The namespaces' first process is unshare's only child.
  local deadline=$(( $(date +%s) + 10 ))
  until NODE_PID=$(cat "/proc/$NODE_UNSHARE_PID/task/$NODE_UNSHARE_PID/children" 2>/dev/null) && [ -n "$NODE_PID" ]; do
    if ! kill -0 "$NODE_UNSHARE_PID" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
      node_show_logs
      node_fail "unshare could not create the node's namespaces (see inside.log above); the node needs root and a kernel with PID, mount and network namespaces"
      return 1
    fi
    sleep 0.05
  done
  NODE_PID=${NODE_PID%% *}
  NODE_PIDNS=$(readlink "/proc/$NODE_PID/ns/pid")
  export NODE_PID
  node_wait_file "$NODE_DIR/forward-node.ready" "$NODE_UNSHARE_PID" 30 \
    || { node_show_logs; node_fail "the node's namespaces did not come up (see the logs above)"; return 1; }
  "$CONTROL_PLANE_BIN/kube-scheduler" --kubeconfig "$NODE_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$NODE_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$NODE_DIR/scheduler.kubeconfig" \
    --secure-port 0 --leader-elect=false --profiling=false --v 1 >"$NODE_DIR/kube-scheduler.log" 2>&1 &
  NODE_SCHEDULER_PID=$!
  node_watchdog
  # Ready, and the node lifecycle controller has taken the not-ready taint off.
  deadline=$(( $(date +%s) + 180 ))
  local state=
  while :; do
    state=$(node_kubectl get node "$NODE_NAME" --request-timeout 5s \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.spec.taints}' 2>/dev/null) || state=
    [ "$state" != "True " ] || break
    if ! kill -0 "$NODE_UNSHARE_PID" 2>/dev/null || ! kill -0 "$NODE_SCHEDULER_PID" 2>/dev/null \
       || [ "$(date +%s)" -ge "$deadline" ]; then
      node_show_logs
      node_fail "the node did not become Ready without taints (last seen: '${state:-not registered}'); see the logs above and $NODE_DIR (CONTROL_PLANE_KEEP=1 keeps it)"
      return 1
    fi
    sleep 0.2
  done
  local ms=$(( ($(date +%s%N) - started) / 1000000 ))
  node_log "node $NODE_NAME Ready in $(( ms / 1000 )).$(( ms % 1000 / 100 ))s (cache checked or built in $(( built / 1000 )).$(( built % 1000 / 100 ))s); pid $NODE_PID, $NODE_DIR"
}

# The processes in the node's PID namespace, `pid (command line)` a line.
node_namespace_processes() {
  local p
  [ -n "${NODE_PIDNS:-}" ] || return 0
  for p in /proc/[0-9]*; do
    if [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$NODE_PIDNS" ]; then
      echo "${p#/proc/} ($(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-80))"
    fi
  done
}

# Everything the node left on the host, one item a line (nothing when it left nothing).
node_leftovers() {
  local p mnt
  node_namespace_processes | sed 's/^/process /'
  for p in ${NODE_SCHEDULER_PID:-} ${NODE_FORWARD_PID:-} ${NODE_UNSHARE_PID:-}; do
    if kill -0 "$p" 2>/dev/null; then
      echo "process $p ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80))"
    fi
  done
  if [ -n "${NODE_DIR:-}" ]; then
    awk -v d="$NODE_DIR" 'index($5, d) == 1 || index($4, d) == 1 { print "mount " $5 }' /proc/self/mountinfo
    [ ! -e "$NODE_DIR" ] || echo "directory $NODE_DIR"
  fi
  if [ -n "${NODE_CGROUP:-}" ]; then
    for mnt in $(node_cgroup_mounts); do
      [ ! -e "$mnt/$NODE_CGROUP" ] || echo "cgroup $mnt/$NODE_CGROUP"
    done
  fi
  for p in $NODE_HOST_PATHS; do
    [ -e "$p" ] || continue
    echo "${NODE_HOST_BEFORE:-}" | grep -qxF "$p" || echo "path $p"
  done
  return 0
}

# Stops the node and checks that it left nothing behind; fails, naming what, if it did.
node_stop() {
  [ -n "${NODE_DIR:-}" ] || return 0
  if [ -n "${NODE_WATCHDOG_PID:-}" ]; then kill "$NODE_WATCHDOG_PID" 2>/dev/null || true; fi
  # The Node goes too (its Pods are then removed by the Pod garbage collector), so the API server
  # does not keep a node that no longer exists.
  if [ -n "${CONTROL_PLANE_KUBECONFIG:-}" ] && [ -e "$CONTROL_PLANE_KUBECONFIG" ]; then
    node_kubectl delete node "$NODE_NAME" --wait=false --request-timeout 5s >/dev/null 2>&1 || true
  fi
  cp_stop_pid "${NODE_SCHEDULER_PID:-}"
  # The first process stops the kubelet and containerd; when it exits, the kernel ends every
  # process left in the PID namespace (shims, containers).
  local mnt
  if [ -n "${NODE_UNSHARE_PID:-}" ]; then
    [ -z "${NODE_PID:-}" ] || kill -TERM "$NODE_PID" 2>/dev/null || true
    for _ in $(seq 1 150); do
      kill -0 "$NODE_UNSHARE_PID" 2>/dev/null || break
      sleep 0.1
    done
    # unshare's child, and with it the whole PID namespace, dies with it (--kill-child).
    kill -KILL "$NODE_UNSHARE_PID" 2>/dev/null || true
    wait "$NODE_UNSHARE_PID" 2>/dev/null || true
    # The kernel ends the namespace's processes; wait until they are gone.
    for _ in $(seq 1 100); do
      [ -n "$(node_namespace_processes)" ] || break
      sleep 0.1
    done
  fi
  cp_stop_pid "${NODE_FORWARD_PID:-}"
  for _ in $(seq 1 100); do
    [ -n "${NODE_CGROUP:-}" ] || break
    local busy=
    for mnt in $(node_cgroup_mounts); do
      [ -e "$mnt/$NODE_CGROUP" ] || continue
      find "$mnt/$NODE_CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ ! -e "$mnt/$NODE_CGROUP" ] || busy=1
    done
    [ -n "$busy" ] || break
    sleep 0.1
  done
  [ -n "${CONTROL_PLANE_KEEP:-}" ] || rm -rf "$NODE_DIR"
  local left
  left=$(node_leftovers)
  [ -z "${CONTROL_PLANE_KEEP:-}" ] || left=$(echo "$left" | grep -v "^directory " || true)
  NODE_SCHEDULER_PID='' NODE_FORWARD_PID='' NODE_UNSHARE_PID='' NODE_WATCHDOG_PID=''
  if [ -n "$left" ]; then
    node_log "the node left things behind on the host: $(echo "$left" | paste -sd ';' -)."
    node_log "remove them by hand (kill the processes, rmdir the cgroups, umount and delete the paths) and report it as a bug"
    NODE_DIR=
    return 1
  fi
  NODE_DIR=
}

# Runs node_stop before whatever EXIT trap the shell already has (cp_stop's, pg_stop's), and
# makes the run fail when the node left something behind.
node_trap_exit() {
  local existing
  # The EXIT trap already set, unquoted (trap -p prints it quoted for eval).
  existing=$(eval "set -- $(trap -p EXIT)"; printf '%s' "${3:-}")
  # shellcheck disable=SC2064
  trap "node_stop || NODE_STOP_FAILED=1${existing:+; $existing}; [ -z \"\${NODE_STOP_FAILED:-}\" ] || exit 1" EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# Ends the node if the shell that started it dies without running its EXIT trap (SIGKILL): the
# kernel ends every process in the node's PID namespace with its first process.
node_watchdog() {
  if [ -n "${NODE_WATCHDOG_PID:-}" ]; then kill "$NODE_WATCHDOG_PID" 2>/dev/null || true; fi
  local parent=$$ d=$NODE_DIR cgroup=$NODE_CGROUP
  local pids="${NODE_SCHEDULER_PID:-} ${NODE_FORWARD_PID:-} ${NODE_UNSHARE_PID:-} ${NODE_PID:-}"
  (
    trap - EXIT HUP INT TERM
    set +e
    while kill -0 "$parent" 2>/dev/null; do sleep 2; done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 1
    for mnt in $(node_cgroup_mounts); do
      [ -n "$cgroup" ] && [ -e "$mnt/$cgroup" ] && find "$mnt/$cgroup" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    rm -rf "$d"
  ) >/dev/null 2>&1 &
  NODE_WATCHDOG_PID=$!
}

# Restarts the node's kubelet (SIGTERM; SIGKILL with --kill) and waits, up to 3 minutes, until the
# new one answers its health check and the Node is Ready with a heartbeat after the restart; prints
# the seconds that took. The Pods run on meanwhile (containerd keeps their containers).
node_restart_kubelet() {
  local signal=USR1 starts since started ready
  [ "${1:-}" != --kill ] || signal=USR2
  command -v curl >/dev/null || { node_fail "curl is missing (it asks the kubelet's health endpoint): apt-get install curl"; return 1; }
  starts=$(cat "$NODE_DIR/kubelet.starts")
  since=$(date -u +%s)
  started=$(date +%s%N)
  kill "-$signal" "$NODE_PID" || { node_fail "the node's first process $NODE_PID is gone"; return 1; }
  local deadline=$(( since + 180 ))
  while :; do
    if [ "$(cat "$NODE_DIR/kubelet.starts")" != "$starts" ] \
      && nsenter "--net=/proc/$NODE_PID/ns/net" -- curl -sf --max-time 2 http://127.0.0.1:10248/healthz >/dev/null 2>&1; then
      # Ready, with a heartbeat the new kubelet sent.
      ready=$(node_kubectl get node "$NODE_NAME" --request-timeout 5s \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null) || ready=
      if [ "${ready%% *}" = True ] && [ "$(date -u -d "${ready#* }" +%s 2>/dev/null || echo 0)" -ge "$since" ]; then
        break
      fi
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      node_show_logs
      node_fail "the kubelet did not come back Ready within 180s of its restart (last seen: '${ready:-no health}')"
      return 1
    fi
    sleep 0.2
  done
  local ms=$(( ($(date +%s%N) - started) / 1000000 ))
  echo "$(( ms / 1000 )).$(( ms % 1000 / 100 ))"
}

# Runs ctr against the node's containerd, in the namespace the kubelet uses.
node_ctr() {
  "$NODE_BIN/ctr" --address "$NODE_CONTAINERD_ADDRESS" -n k8s.io "$@"
}

# Runs a command in the node's network and mount namespaces.
node_enter() {
  nsenter --target "$NODE_PID" --net --mount -- "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = __inside ]; then
  NODE_FORWARD="$(dirname "$NODE_SCRIPT")/node-forward.py"
  node_inside "$2"
fi
