#!/usr/bin/env bash
# A real, local Kubernetes control plane for wasmpilot's end-to-end tests:
# etcd + kube-apiserver + kube-controller-manager v1.20.2 on loopback, no Docker.
#
# kube-apiserver and kube-controller-manager are built once from Debian's
# `kubernetes` source package (it ships a complete vendor/ tree, so it builds
# offline) and cached; etcd comes from Debian's etcd-server. See
# shared/notes/local-kubernetes.md for the facts behind every step here.
#
# Usage: deploy/local/cluster.sh <command>
#   up                 build if needed, then start whatever is not running; wait until ready
#                      (control plane and the node; WASMPILOT_NODE=0: control plane only)
#   down [--purge]     stop what `up` started (by recorded PID), drain and remove the node's
#                      pods, mounts, bridge and iptables rules; --purge also deletes etcd data
#   check-clean        after `down`: exit 1 if any node process, mount, interface or rule is left
#   load-image ARCHIVE import an OCI archive into the node's containerd (deploy/local/image.sh)
#   env                print `export KUBECONFIG=... WASMPILOT_AUDIT_LOG=...` (use: eval "$(deploy/local/cluster.sh env)")
#   status             print what is running; exit 0 only when all of it is running and ready
#   build              build and cache the binaries (also done by `up` when they are missing)
#   stop-apiserver | start-apiserver | restart-apiserver
#
# Environment:
#   WASMPILOT_CACHE             cache root (default ~/.cache/wasmpilot); binaries in k8s/, state in local/
#   WASMPILOT_APISERVER_PORT    kube-apiserver secure port (default 16443)
#   WASMPILOT_ETCD_PORT         etcd client port (default 23790)
#   WASMPILOT_ETCD_PEER_PORT    etcd peer port (default 23800)
#   WASMPILOT_READY_TIMEOUT     seconds to wait for each component to become ready (default 90)
#   WASMPILOT_KEEP_BUILD=1      keep the source tree and Go cache of a build (for debugging it)
#   WASMPILOT_APISERVER_PROFILING=1  serve the API server's /debug/pprof (where its CPU goes in a
#                               bench: kubectl get --raw '/debug/pprof/profile?seconds=30'; go tool pprof)
#
# Users and tokens (static token file, state dir pki/tokens.csv):
#   admin                             group system:masters   -> kubeconfig
#   system:kube-controller-manager    group system:masters   (see start_controller_manager)
#   wasmpilot-limited                 no groups, no RBAC yet -> kubeconfig-limited
#
# 1.20.2 has unpatched CVEs and is for tests only. Without the node it listens on 127.0.0.1
# only; with it, on every address (pods reach it through the `kubernetes` Service at the
# machine's address), so run it only on a machine no one else can reach.
#
# The node (deploy/local/node.sh): containerd + runc + CNI bridge from Debian, kubelet,
# kube-proxy and kube-scheduler from the same source, images built here (pause, busybox) and
# imported into containerd; pods get 10.88.0.0/16 on bridge wasmpilot0.
set -euo pipefail

CACHE="${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}"
K8S_CACHE="$CACHE/k8s"
STATE="$CACHE/local"
PKI="$STATE/pki"
LOGS="$STATE/logs"
RUN="$STATE/run"
ETCD_DATA="$STATE/etcd"
KUBECONFIG_ADMIN="$STATE/kubeconfig"
# The API server's audit log: every write (create, update, patch, delete) with the user who
# made it and the user it impersonated (tests read it to see who wrote what).
AUDIT_LOG="$STATE/audit.log"
KUBECONFIG_LIMITED="$STATE/kubeconfig-limited"
KUBECONFIG_KCM="$STATE/kubeconfig-controller-manager"

APISERVER_PORT="${WASMPILOT_APISERVER_PORT:-16443}"
ETCD_PORT="${WASMPILOT_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${WASMPILOT_ETCD_PEER_PORT:-23800}"
READY_TIMEOUT="${WASMPILOT_READY_TIMEOUT:-90}"

K8S_GIT_VERSION="v1.20.2"
ETCD_BIN="/usr/bin/etcd"
GO_BIN="/usr/lib/go/bin/go" # Debian's golang-go (1.19 on bookworm)
REFLECT2_DEBIAN="/usr/share/gocode/src/github.com/modern-go/reflect2"
BUILD_PACKAGES=(dpkg-dev golang-go etcd-server golang-github-modern-go-reflect2-dev openssl curl gcc libc6-dev)
RUN_PACKAGES=(etcd-server openssl curl)

APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ---------------------------------------------------------------- locking

# One lock for everything that changes state (build, up, down, ...), so that two
# concurrent `up`s neither build twice nor start the control plane twice.
# Started daemons get fd 9 closed so they do not hold it.
take_lock() {
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.cluster.lock"
  if ! flock -n 9; then
    log "waiting for another cluster.sh (lock $CACHE/.cluster.lock)..."
    flock 9
  fi
}

# ---------------------------------------------------------------- packages

missing_packages() {
  local p status
  for p in "$@"; do
    status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
    [[ "$status" == "install ok installed" ]] || printf '%s\n' "$p"
  done
}

apt_updated=0
apt_update() {
  if [[ "$apt_updated" == 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    apt_updated=1
  fi
}

ensure_packages() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  [[ ${#missing[@]} -eq 0 ]] && return 0
  [[ $EUID -eq 0 ]] || die "missing Debian packages (run as root or install them): ${missing[*]}"
  apt_update
  log "apt-get install ${missing[*]}"
  mkdir -p "$CACHE"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    >"$CACHE/apt-install.log" 2>&1; then
    tail -n 30 "$CACHE/apt-install.log" >&2
    die "apt-get install failed (log $CACHE/apt-install.log)"
  fi
}

# deb-src entries are not in the base image: derive them from the deb ones.
ensure_deb_src() {
  local src=/etc/apt/sources.list.d/debian.sources dst=/etc/apt/sources.list.d/wasmpilot-deb-src.sources
  if [[ ! -f "$dst" ]]; then
    [[ -f "$src" ]] || die "$src not found: cannot derive deb-src entries"
    log "writing $dst (deb-src entries derived from $src)"
    sed -e 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb-src/' "$src" >"$dst.tmp"
    mv "$dst.tmp" "$dst"
    apt_updated=0
  fi
  if [[ "$apt_updated" == 0 ]] && ! apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Package: kubernetes'; then
    apt_update
  fi
}

# ---------------------------------------------------------------- build

# Prints the newest cached bin dir holding both binaries, or nothing.
# The control plane's binaries, and the node's (kubelet, kube-proxy) with the scheduler that
# places pods on it: all from the same Debian source.
CONTROL_PLANE_COMMANDS=(kube-apiserver kube-controller-manager)
NODE_COMMANDS=(kube-scheduler kubelet kube-proxy)

cached_bin_dir() {
  local d best=""
  for d in "$K8S_CACHE"/[0-9]*/bin; do # not build.*/ or trash.*/
    [[ -x "$d/kube-apiserver" && -x "$d/kube-controller-manager" ]] || continue
    if [[ -z "$best" ]] || [[ "$(printf '%s\n%s\n' "$best" "$d" | sort -V | tail -n1)" == "$d" ]]; then
      best="$d"
    fi
  done
  printf '%s' "$best"
}

BIN_DIR=""
# ensure_binaries [--node]: the control plane's binaries (and the node's), built if missing.
ensure_binaries() {
  local wanted=("${CONTROL_PLANE_COMMANDS[@]}") missing=() cmd
  [[ "${1:-}" == --node ]] && wanted+=("${NODE_COMMANDS[@]}")
  BIN_DIR="$(cached_bin_dir)"
  for cmd in "${wanted[@]}"; do
    [[ -n "$BIN_DIR" && -x "$BIN_DIR/$cmd" ]] || missing+=("$cmd")
  done
  # The pause binary is built with the kubelet.
  if [[ "${1:-}" == --node && " ${missing[*]} " != *" kubelet "* ]] && [[ ! -x "$BIN_DIR/pause" ]]; then
    missing+=(kubelet)
  fi
  [[ ${#missing[@]} -eq 0 ]] && return 0
  build_binaries "${missing[@]}"
  BIN_DIR="$(cached_bin_dir)"
  [[ -n "$BIN_DIR" ]] || die "build finished but no binaries under $K8S_CACHE"
}

# build_binaries COMMAND...: builds these cmd/ binaries into the cache.
# Runs in a subshell: it changes directory, exports Go variables and sets an EXIT trap.
build_binaries() (
  local started=$SECONDS commands=("$@")
  [[ $EUID -eq 0 ]] || die "building needs root (apt-get)"
  ensure_deb_src
  ensure_packages "${BUILD_PACKAGES[@]}"
  [[ -x "$GO_BIN" ]] || die "$GO_BIN not found (golang-go)"
  [[ -d "$REFLECT2_DEBIAN" ]] || die "$REFLECT2_DEBIAN not found (golang-github-modern-go-reflect2-dev)"

  mkdir -p "$K8S_CACHE"
  remove_in_background "$K8S_CACHE"/build.* "$K8S_CACHE"/trash.* # left by a killed build
  local work
  work="$(mktemp -d "$K8S_CACHE/build.XXXXXX")"
  if [[ "${WASMPILOT_KEEP_BUILD:-0}" == 1 ]]; then
    log "keeping build dir $work (WASMPILOT_KEEP_BUILD=1)"
  else
    # The Go cache (~1.3 GB) and the source (~313 MB) are not needed afterwards.
    # shellcheck disable=SC2064 # expand $work now
    trap "remove_in_background '$work'" EXIT
  fi

  log "apt-get source kubernetes (into $work)"
  (cd "$work" && apt-get source -qq kubernetes >"$work/apt-source.log" 2>&1) ||
    {
      tail -n 30 "$work/apt-source.log" >&2
      die "apt-get source kubernetes failed"
    }
  local src version
  src="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
  [[ -n "$src" ]] || die "no kubernetes-* source dir after apt-get source"
  version="$(cd "$src" && dpkg-parsechangelog -S Version)"
  log "Debian source version $version"

  # Fix 1: module mode fails (go.mod needs updates, disabled by -mod=vendor):
  # build in GOPATH mode like upstream 1.20, through a symlink.
  export GOPATH="$work/gopath" GOCACHE="$work/gocache" GOTMPDIR="$work/tmp"
  export GO111MODULE=off CGO_ENABLED=0 GOFLAGS='' GOPROXY=off GOTOOLCHAIN=local
  mkdir -p "$GOPATH/src/k8s.io" "$GOCACHE" "$GOTMPDIR"
  ln -s "$src" "$GOPATH/src/k8s.io/kubernetes"
  cd "$GOPATH/src/k8s.io/kubernetes" # logical cd: go sees the GOPATH path via $PWD

  # Fix 3: vendored reflect2 v1.0.1 crashes the apiserver under Go >= 1.18
  # (fatal error: fault in mapiterinit) on the first custom-resource create.
  rm -rf vendor/github.com/modern-go/reflect2
  cp -a "$REFLECT2_DEBIAN" vendor/github.com/modern-go/reflect2

  # Fix 2: pkg/generated/openapi/zz_generated.openapi.go is not in the tarball.
  log "generating pkg/generated/openapi with the vendored openapi-gen"
  "$GO_BIN" build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  local dirs
  dirs="$(openapi_input_dirs)"
  [[ -n "$dirs" ]] || die "found no +k8s:openapi-gen= packages"
  "$work/openapi-gen" \
    --input-dirs "$dirs" \
    --output-base "$GOPATH/src" \
    --output-package k8s.io/kubernetes/pkg/generated/openapi \
    --output-file-base zz_generated.openapi \
    --go-header-file vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    --report-filename "$work/openapi-violations.txt" \
    >"$work/openapi-gen.log" 2>&1 ||
    {
      tail -n 30 "$work/openapi-gen.log" >&2
      die "openapi-gen failed"
    }
  [[ -s pkg/generated/openapi/zz_generated.openapi.go ]] || die "openapi-gen wrote no zz_generated.openapi.go"

  local ldflags="-s -w" pkg
  for pkg in k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version k8s.io/kubernetes/vendor/k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_GIT_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=20"
  done
  local out="$work/bin" cmd
  mkdir -p "$out"
  log "go build ${commands[*]} (~2 min each on 2 cores)"
  for cmd in "${commands[@]}"; do
    log "go build ./cmd/$cmd"
    "$GO_BIN" build -tags selinux,notest -ldflags "$ldflags" -o "$out/$cmd" "./cmd/$cmd"
    "$out/$cmd" --version 2>&1 | grep -qF "$K8S_GIT_VERSION" || die "built $cmd does not report $K8S_GIT_VERSION"
  done
  if [[ " ${commands[*]} " == *" kubelet "* ]]; then
    # The pod sandbox's process, from the same source: the node's pause image runs it.
    log "gcc -static build/pause/linux/pause.c"
    gcc -Os -static -DVERSION="$K8S_GIT_VERSION" -o "$out/pause" build/pause/linux/pause.c
    commands+=(pause)
  fi

  cd /
  local dest="$K8S_CACHE/$version"
  mkdir -p "$dest"
  if [[ -x "$out/kube-apiserver" ]]; then
    # A new control plane replaces the whole bin dir (it appears complete or not at all).
    [[ -d "$dest/bin" ]] && for cmd in "${NODE_COMMANDS[@]}" pause; do
      [[ -x "$dest/bin/$cmd" && ! -e "$out/$cmd" ]] && cp -a "$dest/bin/$cmd" "$out/$cmd"
    done
    rm -rf "${dest:?}/bin"
    mv "$out" "$dest/bin"
  else
    # Node binaries join the control plane's: each appears complete or not at all.
    [[ -x "$dest/bin/kube-apiserver" ]] ||
      die "Debian's kubernetes source is now $version, not the cached control plane's: rm -rf $K8S_CACHE and run again"
    for cmd in "${commands[@]}"; do mv "$out/$cmd" "$dest/bin/$cmd"; done
  fi
  log "cached ${commands[*]} in $dest/bin (built in $((SECONDS - started)) s)"
)

# remove_in_background DIR...: deleting a build tree takes a minute or two here
# (~100k files); rename it away at once and delete it detached from us.
remove_in_background() {
  local d trash=()
  for d in "$@"; do
    [[ -d "$d" ]] || continue
    if [[ "$(basename "$d")" == trash.* ]]; then
      trash+=("$d")
    elif mv "$d" "$K8S_CACHE/trash.${d##*.}.$$" 2>/dev/null; then
      trash+=("$K8S_CACHE/trash.${d##*.}.$$")
    fi
  done
  [[ ${#trash[@]} -gt 0 ]] || return 0
  setsid nohup rm -rf "${trash[@]}" </dev/null >/dev/null 2>&1 9>&- &
}

# Every package tagged +k8s:openapi-gen=, as upstream's Makefile.generated_files finds
# them (files with a column-0 `// +k8s:` tag that mention openapi-gen), with staging
# paths mapped to vendor/ and without code-generator and sample-apiserver.
openapi_input_dirs() {
  grep -rl --include='*.go' -e '^// *+k8s:' pkg cmd plugin staging/src vendor |
    xargs grep -l -e '+k8s:openapi-gen=' |
    sed -e 's|^staging/src/|vendor/|' |
    xargs -n1 dirname |
    grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' |
    LC_ALL=C sort -u |
    sed -e 's|^|k8s.io/kubernetes/|' |
    paste -sd, -
}

# ---------------------------------------------------------------- PKI and kubeconfigs

ensure_pki() {
  if [[ -s "$PKI/ca.crt" && -s "$PKI/ca.key" && -s "$PKI/apiserver.crt" && -s "$PKI/apiserver.key" &&
    -s "$PKI/sa.key" && -s "$PKI/sa.pub" && -s "$PKI/tokens.csv" ]]; then
    return 0
  fi
  log "generating PKI and tokens in $PKI"
  rm -rf "$PKI.tmp"
  mkdir -p "$PKI.tmp"
  (
    umask 077
    cd "$PKI.tmp"
    cat >ca.cnf <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = wasmpilot-local-ca
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
EOF
    cat >apiserver.cnf <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = kube-apiserver
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
subjectAltName = IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -key ca.key -config ca.cnf -extensions v3_ca -days 3650 -sha256 -out ca.crt
    openssl genrsa -out apiserver.key 2048 2>/dev/null
    openssl req -new -key apiserver.key -config apiserver.cnf -out apiserver.csr
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
      -extfile apiserver.cnf -extensions v3_server -out apiserver.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    # token,user,uid[,"group1,group2"]
    {
      printf '%s,admin,admin,"system:masters"\n' "$(openssl rand -hex 24)"
      # With --use-service-account-credentials=false every controller acts as this user;
      # the system:kube-controller-manager ClusterRole alone cannot e.g. create ReplicaSets.
      printf '%s,system:kube-controller-manager,system:kube-controller-manager,"system:masters"\n' "$(openssl rand -hex 24)"
      printf '%s,wasmpilot-limited,wasmpilot-limited\n' "$(openssl rand -hex 24)"
    } >tokens.csv
    rm -f apiserver.csr ca.srl
  )
  rm -rf "$PKI"
  mv "$PKI.tmp" "$PKI"
}

token_of() { awk -F, -v u="$1" '$2 == u { print $1; exit }' "$PKI/tokens.csv"; }

# write_kubeconfig FILE USER
write_kubeconfig() {
  local file="$1" user="$2" token ca
  token="$(token_of "$user")"
  [[ -n "$token" ]] || die "no token for $user in $PKI/tokens.csv"
  ca="$(base64 -w0 <"$PKI/ca.crt")"
  (
    umask 077
    cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: wasmpilot-local
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $ca
users:
- name: $user
  user:
    token: $token
contexts:
- name: wasmpilot-local
  context:
    cluster: wasmpilot-local
    user: $user
    namespace: default
current-context: wasmpilot-local
EOF
  )
  mv "$file.tmp" "$file"
}

# ---------------------------------------------------------------- processes

pidfile() { printf '%s/%s.pid' "$RUN" "$1"; }

# The binary a component runs.
binary_of() {
  case "$1" in
  etcd) printf '%s' "$ETCD_BIN" ;;
  kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | kube-proxy)
    printf '%s/%s' "${BIN_DIR:-$(cached_bin_dir)}" "$1"
    ;;
  containerd) printf '/usr/bin/containerd' ;;
  *) die "unknown component $1" ;;
  esac
}

# Prints the recorded PID of a component if that process is alive and still runs the
# expected binary (guards against PID reuse; a zombie has no exe and does not count).
running_pid() {
  local name="$1" pid exe want
  [[ -f "$(pidfile "$name")" ]] || return 1
  pid="$(<"$(pidfile "$name")")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  exe="${exe% (deleted)}"
  want="$(readlink -f "$(binary_of "$name")" 2>/dev/null || binary_of "$name")"
  if [[ "$exe" != "$want" ]]; then
    # a kube binary from an older cached build still counts
    [[ "$name" != etcd && "$exe" == "$K8S_CACHE"/*/bin/"$name" ]] || return 1
  fi
  printf '%s' "$pid"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_component NAME ARGS...: in the background, in its own session, detached from
# the caller's terminal and from our lock, logging to $LOGS/NAME.log.
start_component() {
  local name="$1" bin
  shift
  bin="$(binary_of "$name")"
  mkdir -p "$LOGS" "$RUN"
  printf '\n===== %s starting %s\n' "$(date -Is)" "$name" >>"$LOGS/$name.log"
  setsid nohup "$bin" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  printf '%s\n' "$!" >"$(pidfile "$name")"
  log "started $name (pid $!, log $LOGS/$name.log)"
}

# wait_gone NAME TENTHS: until NAME's process is gone, at most TENTHS/10 s.
wait_gone() {
  local i
  for ((i = 0; i < $2; i++)); do
    running_pid "$1" >/dev/null || return 0
    sleep 0.1
  done
  ! running_pid "$1" >/dev/null
}

# SIGTERM first. kube-apiserver then waits up to a minute for open watches to end
# (e.g. the controller-manager's); a second SIGTERM makes a Kubernetes binary exit at
# once (k8s.io/apiserver/pkg/server/signal.go), so send one after 3 s; SIGKILL last.
stop_component() {
  local name="$1" pid
  if ! pid="$(running_pid "$name")"; then
    rm -f "$(pidfile "$name")"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_gone "$name" 30; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$name" 100; then
      log "$name did not exit after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$name" 50 || die "could not stop $name (pid $pid)"
    fi
  fi
  rm -f "$(pidfile "$name")"
}

fail_with_log() {
  local name="$1"
  shift
  log "error: $*"
  log "last lines of $LOGS/$name.log:"
  tail -n 40 "$LOGS/$name.log" >&2 || true
  exit 1
}

# still_starting NAME: the process just started for NAME is alive, though it may not have
# exec'd into the component yet (its exe is still setsid or nohup on a busy machine, so
# running_pid does not recognise it).
still_starting() {
  local pid state
  pid="$(<"$(pidfile "$1")")" 2>/dev/null || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# wait_for NAME DESCRIPTION COMMAND...: until COMMAND succeeds, NAME dies, or the timeout.
wait_for() {
  local name="$1" what="$2" deadline=$((SECONDS + READY_TIMEOUT))
  shift 2
  until "$@"; do
    running_pid "$name" >/dev/null || still_starting "$name" ||
      fail_with_log "$name" "$name exited while waiting for $what"
    ((SECONDS < deadline)) || fail_with_log "$name" "timed out after ${READY_TIMEOUT}s waiting for $what"
    sleep 0.2
  done
}

# shellcheck disable=SC2317 # called via wait_for
etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }

# api_get PATH [TOKEN]: GET on the apiserver, body on stdout.
api_get() {
  curl -fsS --max-time 3 --cacert "$PKI/ca.crt" -H "Authorization: Bearer ${2:-$(token_of admin)}" "$APISERVER_URL$1" 2>/dev/null
}
apiserver_ready() { [[ "$(api_get /readyz)" == ok ]]; }
# shellcheck disable=SC2317 # called via wait_for
default_sa_exists() { api_get /api/v1/namespaces/default/serviceaccounts/default >/dev/null; }

start_etcd() {
  running_pid etcd >/dev/null && return 0
  [[ -x "$ETCD_BIN" ]] || die "$ETCD_BIN not found (etcd-server)"
  port_in_use "$ETCD_PORT" && die "port $ETCD_PORT is in use by another process (set WASMPILOT_ETCD_PORT)"
  port_in_use "$ETCD_PEER_PORT" && die "port $ETCD_PEER_PORT is in use by another process (set WASMPILOT_ETCD_PEER_PORT)"
  mkdir -p "$ETCD_DATA"
  chmod 700 "$ETCD_DATA"
  start_component etcd \
    --name wasmpilot \
    --data-dir "$ETCD_DATA" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "wasmpilot=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state new \
    --snapshot-count 10000
  wait_for etcd "etcd /health" etcd_healthy
}

# Returns the space of the history the API server compacted (every 5 min) to the file system, so
# the data directory does not grow across sessions and etcd starts fast. Best effort.
defragment_etcd() {
  etcd_healthy || return 0
  local before after
  before="$(du -sm "$ETCD_DATA" 2>/dev/null | cut -f1)"
  if curl -fsS --max-time 120 -X POST -d '{}' "http://127.0.0.1:$ETCD_PORT/v3/maintenance/defragment" >/dev/null 2>&1; then
    after="$(du -sm "$ETCD_DATA" 2>/dev/null | cut -f1)"
    log "etcd defragmented: ${before:-?} MiB -> ${after:-?} MiB"
  else
    log "etcd defragment failed (ignored)"
  fi
}

# What the running API server was started with: node mode and address, tokens, certificate.
# Writes only, at Metadata level (who, what, when; no bodies), once per request; not the
# node's and the control plane's own steady traffic.
audit_policy() {
  cat <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    userGroups: [system:nodes]
  - level: None
    users: [system:kube-controller-manager, system:kube-scheduler, system:kube-proxy]
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
POLICY
}

apiserver_config() {
  printf 'node=%s ip=%s tokens=%s cert=%s audit=%s\n' "${WASMPILOT_NODE:-1}" "$(node_wanted && node_ip)" \
    "$(sha256sum <"$PKI/tokens.csv" | cut -c1-16)" "$(sha256sum <"$PKI/apiserver.crt" | cut -c1-16)" \
    "$(audit_policy | sha256sum | cut -c1-16)"
  printf 'profiling=%s delete-collection-workers=4\n' "${WASMPILOT_APISERVER_PROFILING:-0}"
}

start_apiserver() {
  running_pid kube-apiserver >/dev/null && return 0
  [[ -s "$PKI/tokens.csv" ]] || die "no PKI yet (run: $0 up)"
  running_pid etcd >/dev/null || die "etcd is not running (run: $0 up)"
  port_in_use "$APISERVER_PORT" && die "port $APISERVER_PORT is in use by another process (set WASMPILOT_APISERVER_PORT)"
  local reach=(--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --endpoint-reconciler-type=none)
  if node_wanted; then
    # Pods reach it at the machine's address (the `kubernetes` Service's endpoint, kept by
    # the API server itself); it reaches kubelets by their InternalIP, with a client certificate.
    reach=(--bind-address=0.0.0.0 --advertise-address="$(node_ip)"
      --kubelet-preferred-address-types=InternalIP
      --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt"
      --kubelet-client-key="$PKI/apiserver-kubelet-client.key")
  fi
  apiserver_config >"$RUN/kube-apiserver.config"
  audit_policy >"$RUN/audit-policy.yaml"
  # --delete-collection-workers=4 (default 1): a deleted namespace's objects are deleted one
  # etcd round trip after another; a 10,000-route bench's namespace (60,000+ objects) took
  # 12–30 min to go, into the next run or test. With 4, its 40,000 Deployments and ReplicaSets
  # went in ~1 min. Measured windows hold no collection deletes.
  # --http2-max-streams-per-connection=100: what current API servers allow (kubernetes#121120;
  # 1.20's default is 1000), so a test of many watches sees the limit a user's cluster has.
  start_component kube-apiserver \
    "${reach[@]}" \
    --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --token-auth-file="$PKI/tokens.csv" \
    --authorization-mode=RBAC \
    --anonymous-auth=false \
    --service-cluster-ip-range=10.0.0.0/16 \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-key-file="$PKI/sa.pub" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --audit-policy-file="$RUN/audit-policy.yaml" \
    --audit-log-path="$AUDIT_LOG" \
    --audit-log-maxsize=64 \
    --audit-log-maxbackup=1 \
    --delete-collection-workers=4 \
    --http2-max-streams-per-connection=100 \
    --profiling="$([[ ${WASMPILOT_APISERVER_PROFILING:-0} == 1 ]] && echo true || echo false)"
  wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready
}

# Client rate limit raised from 20/s (burst 30): a benchmark creating 2,000 Deployments would
# otherwise wait minutes for their ReplicaSets, and namespace deletion lags behind tests.
start_controller_manager() {
  running_pid kube-controller-manager >/dev/null && return 0
  write_kubeconfig "$KUBECONFIG_KCM" system:kube-controller-manager
  start_component kube-controller-manager \
    --kubeconfig="$KUBECONFIG_KCM" \
    --secure-port=0 \
    --port=0 \
    --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key" \
    --use-service-account-credentials=false \
    --kube-api-qps=200 \
    --kube-api-burst=400 \
    --controllers='*'
  wait_for kube-controller-manager "the default ServiceAccount (controller-manager ready)" default_sa_exists
}

# ---------------------------------------------------------------- commands

all_ready() {
  running_pid etcd >/dev/null && running_pid kube-apiserver >/dev/null &&
    running_pid kube-controller-manager >/dev/null && apiserver_ready &&
    [[ "$(cat "$RUN/kube-apiserver.config" 2>/dev/null)" == "$(apiserver_config)" ]] &&
    { ! node_wanted || { node_running && node_ready; }; }
}

print_usage_hint() {
  cat <<EOF
Cluster ready: kube-apiserver $K8S_GIT_VERSION at $APISERVER_URL
  export KUBECONFIG=$KUBECONFIG_ADMIN     # admin (system:masters)
  kubectl get ns
Limited user (no RBAC bindings): $KUBECONFIG_LIMITED
Logs: $LOGS/   Stop: $0 down
EOF
}

cmd_up() {
  local started=$SECONDS
  take_lock
  if [[ -s "$PKI/tokens.csv" && -n "$(cached_bin_dir)" ]] && all_ready; then
    BIN_DIR="$(cached_bin_dir)"
    write_kubeconfig "$KUBECONFIG_ADMIN" admin
    write_kubeconfig "$KUBECONFIG_LIMITED" wasmpilot-limited
    # The kubelet removes unused images when the disk runs low (DiskPressure), and the node
    # cannot pull them again (no registry): build any that went.
    if node_wanted; then ensure_node_images; fi
    log "already running and ready"
    print_usage_hint
    return 0
  fi
  if node_wanted; then ensure_binaries --node; else ensure_binaries; fi
  ensure_packages "${RUN_PACKAGES[@]}"
  ensure_pki
  if node_wanted; then
    ensure_node_pki "$(node_ip)"
    ensure_node_tokens || true
  fi
  write_kubeconfig "$KUBECONFIG_ADMIN" admin
  write_kubeconfig "$KUBECONFIG_LIMITED" wasmpilot-limited
  mkdir -p "$RUN"
  if running_pid kube-apiserver >/dev/null &&
    [[ "$(cat "$RUN/kube-apiserver.config" 2>/dev/null)" != "$(apiserver_config)" ]]; then
    log "kube-apiserver runs with another configuration (node mode, address, tokens or certificate): restarting it"
    stop_component kube-apiserver
  fi
  start_etcd
  start_apiserver
  start_controller_manager
  if node_wanted; then start_node; elif running_pid kubelet >/dev/null || running_pid containerd >/dev/null; then
    log "WASMPILOT_NODE=0: stopping the node"
    stop_node
  fi
  log "up in $((SECONDS - started)) s"
  print_usage_hint
}

cmd_down() {
  local purge=0
  case "${1:-}" in
  "") ;;
  --purge) purge=1 ;;
  *) die "usage: $0 down [--purge]" ;;
  esac
  take_lock
  BIN_DIR="$(cached_bin_dir)"
  stop_node
  stop_component kube-controller-manager
  stop_component kube-apiserver
  [[ "$purge" == 1 ]] || defragment_etcd
  stop_component etcd
  if [[ "$purge" == 1 ]]; then
    log "deleting etcd data $ETCD_DATA"
    rm -rf "$ETCD_DATA"
  fi
  log "down (state kept in $STATE)"
}

cmd_status() {
  local name pid rc=0
  local names=(etcd kube-apiserver kube-controller-manager)
  node_wanted && names+=(containerd kubelet kube-proxy kube-scheduler)
  for name in "${names[@]}"; do
    if pid="$(running_pid "$name")"; then
      printf '%-24s running (pid %s)\n' "$name" "$pid"
    else
      printf '%-24s stopped\n' "$name"
      rc=1
    fi
  done
  if [[ -s "$PKI/tokens.csv" ]] && apiserver_ready; then
    printf '%-24s ok (%s)\n' "readyz" "$APISERVER_URL"
  else
    printf '%-24s not ready (%s)\n' "readyz" "$APISERVER_URL"
    rc=1
  fi
  if node_wanted; then
    if [[ -s "$PKI/tokens.csv" ]] && node_ready; then
      printf '%-24s Ready (%s, pods %s on %s)\n' "node $NODE_NAME" "$(node_ip)" "$POD_CIDR" "$NODE_BRIDGE"
    else
      printf '%-24s not Ready\n' "node $NODE_NAME"
      rc=1
    fi
  else
    printf '%-24s none (WASMPILOT_NODE=0: control plane only)\n' "node"
  fi
  printf '%-24s %s\n' "kubeconfig" "$KUBECONFIG_ADMIN" "binaries" "$(cached_bin_dir || true)" "logs" "$LOGS"
  return "$rc"
}

cmd_build() {
  take_lock
  ensure_binaries "$@"
  log "binaries: $BIN_DIR"
  printf '%s\n' "$BIN_DIR"
}

cmd_start_apiserver() {
  take_lock
  ensure_binaries
  start_apiserver
}

# The node's functions (start_node, stop_node, check_clean, ...).
# shellcheck source=deploy/local/node.sh
source "$(dirname "${BASH_SOURCE[0]}")/node.sh"

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
  up) cmd_up ;;
  down) cmd_down "$@" ;;
  env) printf 'export KUBECONFIG=%s\nexport WASMPILOT_AUDIT_LOG=%s\n' "$KUBECONFIG_ADMIN" "$AUDIT_LOG" ;;
  status) cmd_status ;;
  build) cmd_build "$@" ;;
  stop-apiserver)
    take_lock
    stop_component kube-apiserver
    ;;
  start-apiserver) cmd_start_apiserver ;;
  load-image)
    [[ -s "${1:-}" ]] || die "usage: $0 load-image OCI-ARCHIVE"
    running_pid containerd >/dev/null || die "the node is not running (run: $0 up)"
    ctr_node images import "$1" >/dev/null
    ;;
  check-clean)
    BIN_DIR="$(cached_bin_dir)"
    check_clean
    ;;
  restart-apiserver)
    take_lock
    stop_component kube-apiserver
    ensure_binaries
    start_apiserver
    ;;
  -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}

main "$@"
exit # never read past this line: an edit of this file during a long `up` must not matter
