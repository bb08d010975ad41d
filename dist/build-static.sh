#!/usr/bin/env bash
# Builds the rollguard binary that ships: the release assets for Linux, the image's binary,
# the action's `version: source` build and the runtime-root test all come from here, so they
# are one binary built one way: the `dist` profile (Cargo.toml: fat LTO, one codegen unit,
# stripped), printed at .../<target>/dist/rollguard.
#
#   dist/build-static.sh [TARGET] [-- CARGO_ARGS...]
#
# Without the `demo` feature: the shipped binary does not link kube-sim (`rollguard demo` is
# for a checkout: `cargo run --release -- demo`). TARGET defaults to the host's triple. On Linux the binary links glibc statically
# (`+crt-static`; glibc 2.34+ resolves names from /etc/hosts and DNS without NSS modules,
# so it runs in an empty root); macOS binaries link the system libraries as Apple requires.
# --target is always passed, so RUSTFLAGS reach only the target's code and not build scripts
# or proc macros, which must stay dynamic. Prints the binary's absolute path on the last
# line (a relative CARGO_TARGET_DIR is taken from the repository's root).
set -euo pipefail
cd "$(dirname "$0")/.."

host="$(rustc -vV | sed -n 's/^host: //p')"
target="${1:-$host}"
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

case "$target" in
  *-linux-gnu)
    export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static"
    if [ "$target" != "$host" ]; then
      # Cross-linking (the image's arm64 build on an amd64 builder): Debian's cross gcc.
      arch="${target%%-*}"
      triple_env="$(echo "$target" | tr 'a-z-' 'A-Z_')"
      export "CARGO_TARGET_${triple_env}_LINKER=${arch}-linux-gnu-gcc"
      export "CC_${target//-/_}=${arch}-linux-gnu-gcc"
      export "AR_${target//-/_}=${arch}-linux-gnu-ar"
    fi
    ;;
  *-apple-darwin) ;;
  *)
    echo "dist/build-static.sh: no recipe for target $target; use one of x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu, aarch64-apple-darwin, x86_64-apple-darwin" >&2
    exit 2
    ;;
esac

cargo build --profile dist --locked --bin rollguard --no-default-features --target "$target" "$@" >&2
dir="${CARGO_TARGET_DIR:-target}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
echo "$dir/$target/dist/rollguard"
