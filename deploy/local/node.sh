# The local cluster's node, sourced by deploy/local/cluster.sh (uses its variables and helpers):
# containerd + runc from Debian, CNI bridge from Debian's containernetworking-plugins, kubelet,
# kube-proxy and kube-scheduler built from the same Debian source as the control plane, and
# images built here with buildah (pause from that source, busybox from busybox-static) and
# imported into containerd. Nothing is pulled. Facts behind each step: shared/notes/local-node.md.
# shellcheck shell=bash

NODE_NAME="wasmpilot-node"
NODE_DIR="$STATE/node"
NODE_SOCK="$NODE_DIR/containerd/containerd.sock"
NODE_BRIDGE="wasmpilot0"
NODE_CNI_NETWORK="wasmpilot"
POD_CIDR="10.88.0.0/16"
PAUSE_IMAGE="localhost/wasmpilot/pause:$K8S_GIT_VERSION"
# MyOwnShell's default image, built here from Debian's busybox-static under its public name, so
# manifests that name it run unchanged (imagePullPolicy IfNotPresent finds it in containerd).
BUSYBOX_IMAGE="docker.io/library/busybox:1.36"
KUBECONFIG_NODE="$STATE/kubeconfig-node"
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack busybox-static buildah iproute2)
# Buildah's own store for the images built here (vfs: works in any container or VM).
BUILDAH=(buildah --root "$NODE_DIR/buildah/root" --runroot "$NODE_DIR/buildah/run" --storage-driver vfs)

node_wanted() { [[ "${WASMPILOT_NODE:-1}" == 1 ]]; }

# The address pods reach the API server at (through the `kubernetes` Service): the machine's
# address on its default route.
node_ip() {
  local ip
  ip="$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')"
  [[ -n "$ip" ]] || ip="$(ip -4 -o addr show scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')"
  [[ -n "$ip" ]] || die "no IPv4 address on this machine for the node"
  printf '%s' "$ip"
}

ctr_node() { ctr --address "$NODE_SOCK" --namespace k8s.io "$@"; }

# Certificates the node needs: a serving certificate for the API server that also names the
# node's address, one for the kubelet, and a client certificate the API server presents to it.
ensure_node_pki() {
  local ip="$1"
  local want_san="IP Address:$ip"
  if openssl x509 -in "$PKI/apiserver.crt" -noout -text 2>/dev/null | grep -qF "$want_san" &&
    [[ -s "$PKI/kubelet.crt" && -s "$PKI/apiserver-kubelet-client.crt" ]] &&
    openssl x509 -in "$PKI/kubelet.crt" -noout -text 2>/dev/null | grep -qF "$want_san"; then
    return 0
  fi
  log "issuing certificates for the node ($ip)"
  (
    umask 077
    cd "$PKI"
    sign() { # sign NAME CN O SAN EKU
      cat >"$1.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = $2
$( [[ -n "$3" ]] && printf 'O = %s' "$3")
[v3]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = $5
$( [[ -n "$4" ]] && printf 'subjectAltName = %s' "$4")
EOF
      openssl genrsa -out "$1.key.tmp" 2048 2>/dev/null
      openssl req -new -key "$1.key.tmp" -config "$1.cnf" -out "$1.csr"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
        -extfile "$1.cnf" -extensions v3 -out "$1.crt.tmp" 2>/dev/null
      mv "$1.key.tmp" "$1.key"
      mv "$1.crt.tmp" "$1.crt"
      rm -f "$1.csr" "$1.cnf" ca.srl
    }
    sign apiserver kube-apiserver "" \
      "IP:127.0.0.1,IP:10.0.0.1,IP:$ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" serverAuth
    sign kubelet "$NODE_NAME" "" "IP:$ip,DNS:$NODE_NAME" serverAuth
    sign apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" clientAuth
  )
}

# The node's users: the kubelet, kube-proxy and kube-scheduler (system:masters: a test cluster).
# Returns 1 when tokens were added (the API server must restart to read them).
ensure_node_tokens() {
  local user added=0
  for user in "system:node:$NODE_NAME" system:kube-proxy system:kube-scheduler; do
    if [[ -z "$(token_of "$user")" ]]; then
      printf '%s,%s,%s,"system:masters"\n' "$(openssl rand -hex 24)" "$user" "$user" >>"$PKI/tokens.csv"
      added=1
    fi
  done
  [[ "$added" == 0 ]]
}

write_node_config() {
  local ip="$1"
  mkdir -p "$NODE_DIR"/{containerd/root,containerd/state,cni/net.d,kubelet,images}
  cat >"$NODE_DIR/containerd.toml" <<EOF
version = 2
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
[grpc]
  address = "$NODE_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This machine's root lacks CAP_SYS_RESOURCE: a negative oom_score_adj is refused.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
EOF
  cat >"$NODE_DIR/cni/net.d/10-$NODE_CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$NODE_CNI_NETWORK",
  "plugins": [
    {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
readOnlyPort: 0
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
serializeImagePulls: false
# A test machine's disk may be fuller than kubelet's defaults allow.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
EOF
  write_kubeconfig "$KUBECONFIG_NODE" "system:node:$NODE_NAME"
  write_kubeconfig "$STATE/kubeconfig-proxy" system:kube-proxy
  write_kubeconfig "$STATE/kubeconfig-scheduler" system:kube-scheduler
}

node_image_present() { ctr_node images ls -q 2>/dev/null | grep -qxF "$1"; }

# build_image NAME ROOTFS COMMAND_JSON [cmd]: a single-layer image of ROOTFS, imported into the
# node; COMMAND_JSON is its entrypoint, or with `cmd` its default command (as busybox's image).
build_image() {
  local name="$1" rootfs="$2" command="$3" c archive="$NODE_DIR/images/image.tar"
  mkdir -p "$NODE_DIR/buildah"
  c="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" copy "$c" "$rootfs" / >/dev/null
  if [[ "${4:-}" == cmd ]]; then
    "${BUILDAH[@]}" config --cmd "$command" --env PATH=/bin "$c"
  else
    "${BUILDAH[@]}" config --entrypoint "$command" --cmd '' "$c"
  fi
  "${BUILDAH[@]}" commit -q "$c" "$name" >/dev/null
  "${BUILDAH[@]}" rm "$c" >/dev/null
  rm -f "$archive"
  "${BUILDAH[@]}" push -q "$name" "oci-archive:$archive:$name" >/dev/null
  ctr_node images import --no-unpack=false "$archive" >/dev/null
  rm -f "$archive"
  log "image $name built and imported into the node"
}

ensure_node_images() {
  local rootfs="$NODE_DIR/images/rootfs"
  if ! node_image_present "$PAUSE_IMAGE"; then
    rm -rf "$rootfs" && mkdir -p "$rootfs"
    install -m 0755 "$BIN_DIR/pause" "$rootfs/pause"
    build_image "$PAUSE_IMAGE" "$rootfs" '["/pause"]'
  fi
  if ! node_image_present "$BUSYBOX_IMAGE"; then
    rm -rf "$rootfs" && mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/etc"
    install -m 0755 /bin/busybox "$rootfs/bin/busybox"
    local applet
    for applet in $(/bin/busybox --list); do
      [[ "$applet" == busybox ]] || ln -sf busybox "$rootfs/bin/$applet"
    done
    chmod 1777 "$rootfs/tmp"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$rootfs/etc/passwd"
    build_image "$BUSYBOX_IMAGE" "$rootfs" '["sh"]' cmd
  fi
  rm -rf "$rootfs"
}

# shellcheck disable=SC2317 # called via wait_for
node_ready() {
  api_get "/api/v1/nodes/$NODE_NAME" | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'
}

start_node() {
  local ip
  ip="$(node_ip)"
  ensure_packages "${NODE_PACKAGES[@]}"
  command -v kubectl >/dev/null || ensure_packages kubernetes-client
  write_node_config "$ip"
  if ! running_pid containerd >/dev/null; then
    start_component containerd --config "$NODE_DIR/containerd.toml"
    wait_for containerd "containerd's socket" ctr_node version
  fi
  ensure_node_images
  if ! running_pid kubelet >/dev/null; then
    start_component kubelet \
      --config="$NODE_DIR/kubelet.yaml" \
      --kubeconfig="$KUBECONFIG_NODE" \
      --container-runtime=remote \
      --container-runtime-endpoint="unix://$NODE_SOCK" \
      --root-dir="$NODE_DIR/kubelet" \
      --hostname-override="$NODE_NAME" \
      --node-ip="$ip" \
      --pod-infra-container-image="$PAUSE_IMAGE" \
      --cgroups-per-qos=false \
      --enforce-node-allocatable=
  fi
  if ! running_pid kube-proxy >/dev/null; then
    start_component kube-proxy \
      --kubeconfig="$STATE/kubeconfig-proxy" \
      --hostname-override="$NODE_NAME" \
      --cluster-cidr="$POD_CIDR" \
      --proxy-mode=iptables \
      --conntrack-max-per-core=0 \
      --metrics-bind-address=127.0.0.1:10249 \
      --healthz-bind-address=127.0.0.1:10256
  fi
  if ! running_pid kube-scheduler >/dev/null; then
    start_component kube-scheduler \
      --kubeconfig="$STATE/kubeconfig-scheduler" \
      --leader-elect=false \
      --port=0 \
      --secure-port=0
  fi
  wait_for kubelet "node $NODE_NAME Ready" node_ready
  # A previous `down` cordoned it so no pod was started while it drained.
  KUBECONFIG="$KUBECONFIG_ADMIN" kubectl uncordon "$NODE_NAME" >/dev/null
}

node_running() {
  running_pid containerd >/dev/null && running_pid kubelet >/dev/null &&
    running_pid kube-proxy >/dev/null && running_pid kube-scheduler >/dev/null
}

# Stops the node and removes what it made: pods (drained through the kubelet, so CNI releases
# their addresses and interfaces), containers and shims, mounts, the bridge, its iptables rules.
stop_node() {
  if running_pid kubelet >/dev/null && apiserver_ready; then
    log "draining node $NODE_NAME"
    KUBECONFIG="$KUBECONFIG_ADMIN" kubectl cordon "$NODE_NAME" >/dev/null 2>&1 || true
    KUBECONFIG="$KUBECONFIG_ADMIN" kubectl delete pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" \
      --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
    local i
    for ((i = 0; i < 150; i++)); do
      [[ -z "$(ctr_node tasks ls -q 2>/dev/null)" ]] && break
      sleep 0.2
    done
  fi
  stop_component kube-scheduler
  stop_component kube-proxy
  stop_component kubelet
  if running_pid containerd >/dev/null; then
    local task
    for task in $(ctr_node tasks ls -q 2>/dev/null); do
      ctr_node tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
      ctr_node tasks delete -f "$task" >/dev/null 2>&1 || true
    done
    for task in $(ctr_node containers ls -q 2>/dev/null); do
      ctr_node containers delete "$task" >/dev/null 2>&1 || true
    done
  fi
  stop_component containerd
  # Shims outlive containerd; those of this node's containerd name its socket.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $NODE_SOCK" 2>/dev/null || true
  # Containers left running (the kubelet or containerd died before they could be stopped):
  # this node's are the ones whose bundle is in its state directory.
  local runc_root=/run/containerd/runc/k8s.io id bundle
  if [[ -d "$runc_root" ]]; then
    while read -r id bundle; do
      [[ "$bundle" == "$NODE_DIR"/* ]] || continue
      runc --root "$runc_root" kill -a "$id" KILL 2>/dev/null || true
      runc --root "$runc_root" delete -f "$id" 2>/dev/null || true
    done < <(runc --root "$runc_root" list -f json 2>/dev/null |
      python3 -c 'import json,sys; [print(c["id"], c["bundle"]) for c in (json.load(sys.stdin) or [])]' 2>/dev/null)
  fi
  local m
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(findmnt -rn -o TARGET | grep -E "^($NODE_DIR|/run/netns/cni-|/var/run/netns/cni-)" | sort -r)
  rm -f /run/netns/cni-* 2>/dev/null || true
  rm -rf "/var/lib/cni/networks/$NODE_CNI_NETWORK" "/var/lib/cni/results"/"$NODE_CNI_NETWORK"-* 2>/dev/null || true
  ip link delete "$NODE_BRIDGE" 2>/dev/null || true
  if [[ -x "${BIN_DIR:-$(cached_bin_dir)}/kube-proxy" ]]; then
    "${BIN_DIR:-$(cached_bin_dir)}/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  remove_node_iptables
}

# Removes every iptables chain (and rule) the kubelet, kube-proxy and CNI made (KUBE-*, CNI-*),
# and nothing else: each table is restored from its own dump without them.
remove_node_iptables() {
  local table dump
  for table in filter nat mangle; do
    dump="$(iptables-save -t "$table" 2>/dev/null)" || continue
    grep -qE '(KUBE-|CNI-)' <<<"$dump" || continue
    grep -vE '^:(KUBE-|CNI-)|^-A (KUBE-|CNI-)|-j (KUBE-|CNI-)|-g (KUBE-|CNI-)' <<<"$dump" |
      iptables-restore -T "$table" || log "could not remove the node's $table rules"
  done
}

# What `down` must leave behind: nothing of the node. Prints what is left; exit 1 if anything.
check_clean() {
  local left=0 what
  # Live processes only: a zombie is already gone (its parent, not the node, has yet to reap it).
  local procs
  procs="$(ps -eo stat=,pid=,args= | awk '$1 !~ /^Z/')"
  for what in "$BIN_DIR/kubelet" "$BIN_DIR/kube-proxy" "$BIN_DIR/kube-scheduler" "containerd --config $NODE_DIR" \
    "containerd-shim-runc-v2 .*-address $NODE_SOCK" "^[^ ]+ +[0-9]+ /pause"; do
    if grep -E -- "$what" <<<"$procs" | grep -v -e 'check-clean' >/dev/null; then
      printf 'process left: %s\n' "$(grep -E -- "$what" <<<"$procs" | head -n 3)"
      left=1
    fi
  done
  if findmnt -rn -o TARGET | grep -E "^($NODE_DIR|/run/netns/cni-)"; then
    printf 'mounts left (above)\n'
    left=1
  fi
  if ip -o link show | grep -E "$NODE_BRIDGE|veth"; then
    printf 'network interfaces left (above)\n'
    left=1
  fi
  local table
  for table in filter nat mangle; do
    if iptables-save -t "$table" 2>/dev/null | grep -E '(KUBE-|CNI-)'; then
      printf 'iptables rules left in %s (above)\n' "$table"
      left=1
    fi
  done
  [[ "$left" == 0 ]] && printf 'clean: no node process, mount, interface or iptables rule left\n'
  return "$left"
}
