#!/usr/bin/env bash
# Builds the Dockerfile's final stage without a Docker engine or a registry: buildah (Debian's
# package) runs that stage, taken from the Dockerfile itself, on a root assembled here by
# dist/rootfs.sh from dist/build-static.sh's binary, the same way the Dockerfile's first two
# stages do. Prints the image's size.
#
#   dist/image.sh [IMAGE_NAME]      (as root; default name localhost/rollguard:dev)
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:-localhost/rollguard:dev}"

for tool in buildah git; do
  command -v "$tool" >/dev/null || {
    echo "dist/image.sh: $tool is missing; install it: apt-get install -y buildah git ca-certificates" >&2
    exit 1
  }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bin="$(CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/dist}" dist/build-static.sh | tail -1)"
dist/rootfs.sh "$work/rootfs" "$bin" >&2

# The final stage, verbatim but for where the root comes from.
awk '/^FROM /{stage=""} {stage = stage $0 "\n"} END {printf "%s", stage}' Dockerfile |
  sed 's|^COPY --from=rootfs /rootfs /$|COPY rootfs /|' >"$work/Containerfile"
grep -q '^COPY rootfs /$' "$work/Containerfile" || {
  echo "dist/image.sh: the Dockerfile's last stage no longer copies /rootfs from the rootfs stage; update this script" >&2
  exit 1
}
# vfs storage: no overlay or fuse needed, works inside a container or a plain VM.
buildah --storage-driver vfs bud --quiet -f "$work/Containerfile" -t "$name" "$work" >&2
buildah --storage-driver vfs images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$name"
