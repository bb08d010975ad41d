#!/usr/bin/env bash
# The kind chores of .github/workflows/e2e.yml, one sub-command each, so that the workflow
# reads as the test it is.
#
#   kind.sh install                         kind $KIND_VERSION, checked against its sha256
#   kind.sh create NAME... [--env]          clusters kind-NAME; merged into $RUNNER_TEMP/kubeconfig,
#                                           with --env also KUBECONFIG_<NAME> (whole kubeconfig) in $GITHUB_ENV
#   kind.sh app DIR NAMESPACE IMAGE NAME... [--never-ready]
#                                           rollguard.yaml (one target per cluster, kubeconfig_env)
#                                           and k8s/app.yaml (Deployment web, 2 replicas of IMAGE)
#   kind.sh expect-image NAMESPACE IMAGE NAME...   Deployment web runs IMAGE, all replicas ready
#   kind.sh cancel-when-waiting NAMESPACE NAME RUN_ID
#                                           once the never-ready version is applied, cancels the run
#   kind.sh dump NAME...                    everything in the clusters, for a failed job's log
set -euo pipefail

kc="${RUNNER_TEMP:?RUNNER_TEMP is not set: run this inside a GitHub Actions job}/kubeconfig"
command="${1:?usage: kind.sh install|create|app|expect-image|cancel-when-waiting|dump ...}"
shift

case "$command" in
  install)
    curl -fsSLo kind "https://kind.sigs.k8s.io/dl/${KIND_VERSION}/kind-linux-amd64"
    curl -fsSLo kind.sha256 "https://kind.sigs.k8s.io/dl/${KIND_VERSION}/kind-linux-amd64.sha256sum"
    echo "$(cut -d' ' -f1 kind.sha256)  kind" | sha256sum --check
    sudo install -m 0755 kind /usr/local/bin/kind
    rm kind kind.sha256
    kind version
    ;;
  create)
    names=()
    env=false
    for a in "$@"; do
      if [ "$a" = --env ]; then env=true; else names+=("$a"); fi
    done
    files=()
    for n in "${names[@]}"; do
      kind create cluster --name "$n" --wait 180s
      kind get kubeconfig --name "$n" >"$RUNNER_TEMP/kind-$n.yaml"
      files+=("$RUNNER_TEMP/kind-$n.yaml")
      if $env; then
        delim="EOF_$(openssl rand -hex 16)"
        upper="$(echo "$n" | tr '[:lower:]' '[:upper:]')"
        { echo "KUBECONFIG_$upper<<$delim"; cat "$RUNNER_TEMP/kind-$n.yaml"; echo "$delim"; } >>"$GITHUB_ENV"
      fi
    done
    KUBECONFIG="$(IFS=:; echo "${files[*]}")" kubectl config view --flatten >"$kc"
    echo "KUBECONFIG=$kc" >>"$GITHUB_ENV"
    kubectl --kubeconfig "$kc" config get-contexts
    ;;
  app)
    dir="$1" ns="$2" image="$3"
    shift 3
    probe=""
    names=()
    for a in "$@"; do
      if [ "$a" = --never-ready ]; then
        # Nothing listens on port 1: the pods run and never become ready.
        probe="          readinessProbe:
            tcpSocket:
              port: 1
            periodSeconds: 2"
      else
        names+=("$a")
      fi
    done
    mkdir -p "$dir/k8s"
    {
      echo "app: web"
      echo "namespace: $ns"
      echo "manifests: [k8s/]"
      echo "targets:"
      for n in "${names[@]}"; do
        echo "  - name: $n"
        echo "    kubeconfig_env: KUBECONFIG_$(echo "$n" | tr '[:lower:]' '[:upper:]')"
      done
    } >"$dir/rollguard.yaml"
    cat >"$dir/k8s/app.yaml" <<APP
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: $image
$probe
APP
    cat "$dir/rollguard.yaml" "$dir/k8s/app.yaml"
    ;;
  expect-image)
    ns="$1" image="$2"
    shift 2
    for n in "$@"; do
      kubectl --kubeconfig "$kc" --context "kind-$n" -n "$ns" rollout status deployment/web --timeout 120s
      got="$(kubectl --kubeconfig "$kc" --context "kind-$n" -n "$ns" get deployment web \
        -o jsonpath='{.spec.template.spec.containers[0].image}')"
      if [ "$got" != "$image" ]; then
        echo "::error title=e2e::kind-$n runs $got, expected $image"
        exit 1
      fi
    done
    ;;
  cancel-when-waiting)
    ns="$1" n="$2" run_id="$3"
    for _ in $(seq 600); do
      port="$(kubectl --kubeconfig "$kc" --context "kind-$n" -n "$ns" get deployment web \
        -o jsonpath='{.spec.template.spec.containers[0].readinessProbe.tcpSocket.port}' 2>/dev/null || true)"
      if [ "$port" = 1 ]; then
        # Let rollguard settle into its wait, then cancel as a person would.
        sleep 5
        echo "the never-ready version is applied; cancelling run $run_id"
        gh run cancel "$run_id"
        exit 0
      fi
      sleep 1
    done
    echo "the never-ready version was never applied in 10 minutes; not cancelling" >&2
    exit 1
    ;;
  dump)
    for n in "$@"; do
      echo "::group::kind-$n"
      kubectl --kubeconfig "$kc" --context "kind-$n" get all,events -A || true
      echo "::endgroup::"
    done
    ;;
  *)
    echo "kind.sh: unknown command $command; see the top of .github/kind.sh" >&2
    exit 2
    ;;
esac
