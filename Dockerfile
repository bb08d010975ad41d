# rollguard for CIs other than GitHub Actions (GitLab CI, Jenkins, Tekton, Buildkite).
#
#   docker build -t rollguard .
#   docker run --rm -v "$PWD:/work" -w /work -e KUBECONFIG_EU rollguard deploy
#
# Three stages: the binary is compiled once on the build machine's own platform (cross-linked
# for arm64), the root file system is assembled on the target platform (its git and
# libraries), and the final image is that folder alone: no package manager, and only busybox's
# sh and a few tools, because GitLab CI and Jenkins run their job scripts through a shell.
# rollguard is PID 1 and handles SIGTERM/SIGINT itself (rolls back, writes the report,
# exits 130), so no init is needed. dist/image.sh builds the final stage without Docker.

# ---- 1. the static binary (dist/build-static.sh: one recipe for every shipped binary)
FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS builder
ARG TARGETARCH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN if [ "$TARGETARCH" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
      && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY . .
RUN case "$TARGETARCH" in \
      amd64) target=x86_64-unknown-linux-gnu ;; \
      arm64) target=aarch64-unknown-linux-gnu ;; \
      *) echo "no rollguard build for $TARGETARCH; platforms: linux/amd64, linux/arm64" >&2; exit 1 ;; \
    esac \
    && rustup target add "$target" \
    && bin="$(dist/build-static.sh "$target" | tail -1)" \
    && install -D -m 0755 "$bin" /out/rollguard

# ---- 2. the root file system, on the target platform (git and its libraries for that arch)
FROM debian:bookworm-slim AS rootfs
# 1 adds git's HTTPS transport (18 MB of libcurl and its libraries), for the git fallback in
# shallow clones; release.yml pushes that build with the tag suffix -git-https.
ARG GIT_HTTPS=0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates busybox-static \
    && rm -rf /var/lib/apt/lists/*
COPY dist/rootfs.sh /usr/local/bin/rootfs.sh
COPY --from=builder /out/rollguard /out/rollguard
RUN GIT_HTTPS="$GIT_HTTPS" /usr/local/bin/rootfs.sh /rootfs /out/rollguard

# ---- 3. the image: the assembled root and nothing else
FROM scratch
COPY --from=rootfs /rootfs /
ENV PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/home/rollguard \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 10001:10001
WORKDIR /home/rollguard
ENTRYPOINT ["rollguard"]
CMD ["--help"]
