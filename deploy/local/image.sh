#!/usr/bin/env bash
# Builds the wasmpilot host image from deploy/Containerfile — the file users build — with base
# images made on this machine, and loads it into the local cluster's node under the name
# deploy/deployment.yaml uses, so `kubectl apply -k deploy/` runs it unchanged.
#
# Usage: deploy/local/image.sh [TAG...]     (default: 0.1.0, the tag deploy/deployment.yaml names)
#
# Base images (built once, cached under ~/.cache/wasmpilot/images):
#   localhost/wasmpilot/debian-build:bookworm  Debian's minbase from the mirror this machine's
#                                              apt uses for bookworm (debootstrap; or
#                                              $WASMPILOT_DEBIAN_MIRROR), through apt's proxy
#                                              with gcc and libc6-dev; the build mounts this
#                                              machine's Rust toolchain and cargo home into it
#   localhost/wasmpilot/cc:bookworm            only what the binary links (libc, libm, libgcc_s,
#                                              the loader), CA certificates, user nonroot (65532)
# The build runs with CARGO_PROFILE=dev and the test build's target directory mounted, so it
# reuses those artifacts (users' default is release). Nothing is pulled from a registry.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}"
IMAGES="$CACHE/images"
TARGET="${CARGO_TARGET_DIR:-$CACHE/target}"
REPOSITORY="ghcr.io/wasmpilot/wasmpilot"
BUILD_BASE="localhost/wasmpilot/debian-build:bookworm"
RUNTIME_BASE="localhost/wasmpilot/cc:bookworm"
BUILDAH=(buildah --root "$IMAGES/buildah/root" --runroot "$IMAGES/buildah/run" --storage-driver vfs)
TAGS=("$@")
[[ ${#TAGS[@]} -gt 0 ]] || TAGS=(0.1.0)

log() { printf '[image] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

ensure_tools() {
  local missing=() tool
  for tool in buildah debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  [[ $EUID -eq 0 ]] || die "missing Debian packages (run as root or install them): ${missing[*]}"
  log "apt-get install ${missing[*]} (log $CACHE/apt-image.log)"
  apt-get update -qq >"$CACHE/apt-image.log" 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    >>"$CACHE/apt-image.log" 2>&1 || die "apt-get install failed (log $CACHE/apt-image.log)"
}

have_image() { "${BUILDAH[@]}" images -q "$1" >/dev/null 2>&1; }

# The mirror this machine's apt takes bookworm's packages from (apt itself reads its sources,
# one-line or deb822), unless $WASMPILOT_DEBIAN_MIRROR names one.
debian_mirror() {
  if [[ -n "${WASMPILOT_DEBIAN_MIRROR:-}" ]]; then
    printf '%s' "$WASMPILOT_DEBIAN_MIRROR"
    return
  fi
  local mirror
  mirror="$(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE) $(CREATED_BY)' 2>/dev/null |
    awk '$2 == "bookworm" && $3 == "Packages" { print $1; exit }')"
  [[ -n "$mirror" ]] || die "no apt source for bookworm's packages on this machine: set WASMPILOT_DEBIAN_MIRROR to a Debian mirror"
  printf '%s' "$mirror"
}

# apt's own proxy for http (Acquire::http::Proxy), for debootstrap, which reads only the
# environment's; the environment's own http_proxy wins.
apt_http_proxy() {
  apt-config shell proxy Acquire::http::Proxy 2>/dev/null | sed -n "s/^proxy='\(.*\)'$/\1/p"
}

# The Debian rootfs both base images come from (debootstrap; ~2 min, cached).
ensure_rootfs() {
  local rootfs="$IMAGES/bookworm-build"
  if [[ ! -x "$rootfs/usr/bin/gcc" ]]; then
    local MIRROR proxy
    MIRROR="$(debian_mirror)"
    proxy="${http_proxy:-$(apt_http_proxy)}"
    [[ -n "$proxy" ]] && export http_proxy="$proxy"
    log "debootstrap bookworm (minbase + gcc, libc6-dev, ca-certificates) from $MIRROR (log $IMAGES/debootstrap.log)"
    rm -rf "$rootfs.tmp"
    debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates bookworm "$rootfs.tmp" "$MIRROR" \
      >"$IMAGES/debootstrap.log" 2>&1 || die "debootstrap failed (log $IMAGES/debootstrap.log)"
    rm -rf "$rootfs"
    mv "$rootfs.tmp" "$rootfs"
  fi
  printf '%s' "$rootfs"
}

ensure_build_base() {
  have_image "$BUILD_BASE" && return 0
  local rootfs c
  rootfs="$(ensure_rootfs)"
  log "base image $BUILD_BASE"
  c="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" copy --quiet "$c" "$rootfs" / >/dev/null
  # Where the build finds the toolchain: this machine's, mounted at the same paths.
  "${BUILDAH[@]}" config --env CARGO_HOME=/root/.cargo --env RUSTUP_HOME=/root/.rustup \
    --env PATH=/root/.cargo/bin:/usr/local/bin:/usr/bin:/bin --env CARGO_NET_OFFLINE=true "$c"
  "${BUILDAH[@]}" commit -q "$c" "$BUILD_BASE" >/dev/null
  "${BUILDAH[@]}" rm "$c" >/dev/null
}

ensure_runtime_base() {
  have_image "$RUNTIME_BASE" && return 0
  local rootfs dir="$IMAGES/cc-rootfs" lib c
  rootfs="$(ensure_rootfs)"
  log "base image $RUNTIME_BASE"
  rm -rf "$dir"
  mkdir -p "$dir/usr/lib/x86_64-linux-gnu" "$dir/lib64" "$dir/etc/ssl/certs" "$dir/tmp"
  for lib in libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2; do
    cp -L "$rootfs/usr/lib/x86_64-linux-gnu/$lib" "$dir/usr/lib/x86_64-linux-gnu/$lib"
  done
  ln -s usr/lib "$dir/lib"
  ln -s ../usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$dir/lib64/ld-linux-x86-64.so.2"
  cp -L "$rootfs/etc/ssl/certs/ca-certificates.crt" "$dir/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/etc/group"
  chmod 1777 "$dir/tmp"
  c="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" copy --quiet "$c" "$dir" / >/dev/null
  "${BUILDAH[@]}" config --user 65532:65532 "$c"
  "${BUILDAH[@]}" commit -q "$c" "$RUNTIME_BASE" >/dev/null
  "${BUILDAH[@]}" rm "$c" >/dev/null
  rm -rf "$dir"
}

main() {
  local started=$SECONDS tag archive="$IMAGES/wasmpilot.tar"
  mkdir -p "$IMAGES" "$TARGET"
  ensure_tools
  ensure_build_base
  ensure_runtime_base
  [[ -d "$HOME/.rustup" && -d "$HOME/.cargo" ]] || die "no Rust toolchain in ~/.rustup and ~/.cargo (rustup installs one)"
  # The build runs offline against this machine's cargo registry: fetch what it needs first.
  cargo fetch --locked >/dev/null 2>&1 || die "cargo fetch failed: run it to see why"
  log "buildah bud -f deploy/Containerfile (log $IMAGES/build.log)"
  "${BUILDAH[@]}" bud --isolation chroot --layers=false -q \
    -f deploy/Containerfile \
    --build-arg BUILDER_IMAGE="$BUILD_BASE" \
    --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" \
    --build-arg CARGO_PROFILE=dev \
    --volume "$HOME/.rustup:/root/.rustup:ro" \
    --volume "$HOME/.cargo:/root/.cargo" \
    --volume "$TARGET:/src/target" \
    -t "$REPOSITORY:${TAGS[0]}" . >"$IMAGES/build.log" 2>&1 ||
    {
      tail -n 30 "$IMAGES/build.log" >&2
      die "building deploy/Containerfile failed (log $IMAGES/build.log)"
    }
  for tag in "${TAGS[@]:1}"; do "${BUILDAH[@]}" tag "$REPOSITORY:${TAGS[0]}" "$REPOSITORY:$tag"; done
  local size
  size="$("${BUILDAH[@]}" inspect --type image --format '{{.Docker.Size}}' "$REPOSITORY:${TAGS[0]}" 2>/dev/null || true)"
  for tag in "${TAGS[@]}"; do
    rm -f "$archive"
    "${BUILDAH[@]}" push -q "$REPOSITORY:$tag" "oci-archive:$archive:$REPOSITORY:$tag" >/dev/null
    deploy/local/cluster.sh load-image "$archive"
    log "$REPOSITORY:$tag loaded into the node (OCI archive $(du -h "$archive" | cut -f1))"
  done
  rm -f "$archive"
  log "done in $((SECONDS - started)) s"
}

main
