#!/usr/bin/env bash
# Assembles the image's whole root file system in a folder: the static rollguard binary,
# git (the git fallback reads manifests at a commit, and fetches it into shallow checkouts)
# with exactly the shared libraries it loads, the CA bundle, a non-root user, and
# a static busybox for /bin/sh and a few tools: GitLab CI runs a job's `script:` and Jenkins
# its `sh` steps through a shell inside the image, so an image without one cannot be used there.
# The Dockerfile's final stage is `FROM scratch` + this folder; the runtime-root test and
# dist/image.sh use the same folder, so what they prove is what the image holds.
#
#   dist/rootfs.sh OUT_DIR ROLLGUARD_BINARY
#   GIT_HTTPS=1 dist/rootfs.sh OUT_DIR ROLLGUARD_BINARY
#
# git's HTTPS transport (git-remote-https) is left out unless GIT_HTTPS=1: Debian links it
# with libcurl-gnutls and two dozen more libraries (GnuTLS, OpenSSL for libssh2, Kerberos,
# LDAP, ...), 18 MB: twice the rest of the root without rollguard. Without it git still reads
# every commit the checkout has and fetches from local and file:// remotes; rollguard says
# what to do when a shallow clone lacks the commit it needs (fetch deeper before it runs, or
# use the -git-https image).
#
# Runs on Debian (the Dockerfile's rootfs stage, or this repository's CI machine) with git,
# ca-certificates and busybox-static installed.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: dist/rootfs.sh OUT_DIR ROLLGUARD_BINARY" >&2
  exit 2
fi
out="$1"
binary="$2"
case "${GIT_HTTPS:-0}" in
  1) git_programs=(/usr/bin/git /usr/lib/git-core/git-remote-http) ;;
  0) git_programs=(/usr/bin/git) ;;
  *) echo "dist/rootfs.sh: GIT_HTTPS is ${GIT_HTTPS}; use 1 (with git's HTTPS transport) or 0" >&2; exit 2 ;;
esac
for need in "${git_programs[@]}" /etc/ssl/certs/ca-certificates.crt /bin/busybox; do
  if [ ! -e "$need" ]; then
    echo "dist/rootfs.sh: $need is missing; install it first: apt-get install -y git ca-certificates busybox-static" >&2
    exit 1
  fi
done
if [ ! -x "$binary" ]; then
  echo "dist/rootfs.sh: $binary is not an executable; build it with dist/build-static.sh" >&2
  exit 1
fi

# The uid the image runs as; the runtime-root test runs the binary as the same uid.
uid=10001

rm -rf "$out"
mkdir -p "$out"/{bin,usr/local/bin,usr/bin,usr/lib/git-core,etc/ssl/certs,tmp,home/rollguard}
install -m 0755 "$binary" "$out/usr/local/bin/rollguard"
install -m 0755 /usr/bin/git "$out/usr/bin/git"
if [ "${GIT_HTTPS:-0}" = 1 ]; then
  install -m 0755 /usr/lib/git-core/git-remote-http "$out/usr/lib/git-core/git-remote-http"
  ln -s git-remote-http "$out/usr/lib/git-core/git-remote-https"
fi
# Fetching from a local or file:// remote runs the other side as git-upload-pack.
ln -s ../../bin/git "$out/usr/lib/git-core/git-upload-pack"
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$out/etc/ssl/certs/ca-certificates.crt"

# A shell and what CI systems' job wrappers call (Jenkins keeps its agent alive with `cat`).
install -m 0755 /bin/busybox "$out/bin/busybox"
for applet in sh cat cp echo env grep head id ls mkdir mv printf rm sed sleep tail tee test tr wc; do
  ln -s busybox "$out/bin/$applet"
done

# The dynamic loader and every library git and its HTTPS helper load, at their own paths.
libs="$(ldd "${git_programs[@]}" |
  awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | sort -u)"
for lib in $libs; do
  mkdir -p "$out$(dirname "$lib")"
  cp -L "$lib" "$out$lib"
done

cat >"$out/etc/passwd" <<PASSWD
root:x:0:0:root:/root:/sbin/nologin
rollguard:x:$uid:$uid:rollguard:/home/rollguard:/sbin/nologin
PASSWD
cat >"$out/etc/group" <<GROUP
root:x:0:
rollguard:x:$uid:
GROUP
# A CI checks the repository out as another uid than the image's; git refuses such a
# repository ("dubious ownership") unless it is declared safe.
cat >"$out/etc/gitconfig" <<'GITCONFIG'
[safe]
	directory = *
GITCONFIG
chmod 1777 "$out/tmp"
chown "$uid:$uid" "$out/home/rollguard"
echo "$out: $(du -sh "$out" | cut -f1)"
