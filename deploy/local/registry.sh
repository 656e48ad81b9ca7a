#!/usr/bin/env bash
# A local OCI registry (Debian's docker-registry, distribution v2) on loopback, for publishing
# components with `wasmpilot push` and pulling them as `oci:` modules.
#
#   registry.sh serve DIR PORT [USER PASSWORD]  run in the foreground (exec), storage and config in
#                                               DIR; with USER/PASSWORD: htpasswd (basic) auth.
#                                               The e2e tests start registries this way.
#   registry.sh up [PORT]                       start one in the background (default port 5000),
#                                               storage under ~/.cache/wasmpilot/registry
#   registry.sh down                            stop the one `up` started
#
# Plain HTTP on 127.0.0.1 only: push and pull with `--insecure` / `insecure: true`.
set -euo pipefail

need() {
  if ! command -v docker-registry >/dev/null 2>&1; then
    echo "registry.sh: docker-registry not found: run deploy/local/setup.sh (apt-get install docker-registry)" >&2
    exit 1
  fi
}

write_config() { # DIR PORT [USER PASSWORD]
  local dir=$1 port=$2 user=${3:-} password=${4:-}
  mkdir -p "$dir/storage"
  local auth=""
  if [ -n "$user" ]; then
    if ! command -v htpasswd >/dev/null 2>&1; then
      echo "registry.sh: htpasswd not found: run deploy/local/setup.sh (apt-get install apache2-utils)" >&2
      exit 1
    fi
    htpasswd -Bbn "$user" "$password" >"$dir/htpasswd"
    auth="auth:
  htpasswd:
    realm: wasmpilot-test
    path: $dir/htpasswd"
  fi
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
$auth
EOF
}

state="${HOME}/.cache/wasmpilot/registry"

case "${1:-}" in
  serve)
    [ $# -eq 3 ] || [ $# -eq 5 ] || { echo "usage: $0 serve DIR PORT [USER PASSWORD]" >&2; exit 2; }
    need
    write_config "$2" "$3" "${4:-}" "${5:-}"
    exec docker-registry serve "$2/config.yml"
    ;;
  up)
    need
    port=${2:-5000}
    if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
      echo "registry already running (pid $(cat "$state/pid")) on 127.0.0.1:$(cat "$state/port")"
      exit 0
    fi
    write_config "$state" "$port"
    nohup docker-registry serve "$state/config.yml" >"$state/registry.log" 2>&1 &
    echo $! >"$state/pid"
    echo "$port" >"$state/port"
    for _ in $(seq 50); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "registry on 127.0.0.1:$port (log: $state/registry.log)"
        echo "push with: wasmpilot push component.wasm oci://127.0.0.1:$port/NAME:TAG --insecure"
        exit 0
      fi
      sleep 0.1
    done
    echo "registry did not start; see $state/registry.log" >&2
    exit 1
    ;;
  down)
    if [ -f "$state/pid" ]; then
      kill "$(cat "$state/pid")" 2>/dev/null || true
      rm -f "$state/pid"
      echo "registry stopped"
    fi
    ;;
  *)
    echo "usage: $0 serve DIR PORT [USER PASSWORD] | up [PORT] | down" >&2
    exit 2
    ;;
esac
