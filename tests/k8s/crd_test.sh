#!/usr/bin/env bash
# The ShareManager CRD (deploy/base/crd.yaml) on a real apiserver: bad names,
# sizes and flags are refused naming the field, the status is a subresource
# (metadata.generation moves with the spec alone), and `kubectl get` shows
# phase, epoch, pod, rolling and age.
set -uo pipefail
# shellcheck source=tests/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

ns=crd-test
cleanup() {
  k delete namespace "$ns" --wait=false >/dev/null 2>&1
  k delete -f "$k8s_repo/deploy/base/crd.yaml" --wait=true >/dev/null 2>&1
}
trap cleanup EXIT

k apply -f "$k8s_repo/deploy/base/crd.yaml" >/dev/null
check "the CRD is established" \
  k wait --for condition=established crd/sharemanagers.share-manager.io --timeout=30s
k create namespace "$ns" >/dev/null

share() { # share NAME [SPEC-JSON]: the object as YAML
  printf 'apiVersion: share-manager.io/v1alpha1\nkind: ShareManager\nmetadata: {name: "%s", namespace: %s}\nspec: %s\n' \
    "$1" "$ns" "${2:-{\}}"
}
created() { share "$@" | k create -f - >/dev/null; }
refused() { # refused WHAT NAME SPEC-JSON: created it is not, and the error names WHAT
  local out
  if out=$(share "$2" "$3" | k create -f - 2>&1); then
    echo "created: $2 $3"
    return 1
  fi
  echo "$out" | grep -qF -- "$1" || {
    echo "error does not name $1: $out"
    return 1
  }
}

check "a share with no spec fields is accepted, to be served" created pvc-a
check "serve defaults to true" \
  test "$(k -n "$ns" get smgr pvc-a -o jsonpath='{.spec.serve}')" = true
check "a volume-named share with flags is accepted" \
  created pvc-b '{daemonFlags: ["--stop-timeout=10s", "--debug"]}'

check "a name with capitals or '_' is refused naming metadata.name" refused metadata.name Bad_Vol '{}'
check "a name with a dot (a DNS subdomain, not a volume name) is refused naming metadata.name" \
  refused metadata.name a.b '{}'
check "a name starting with a digit (no Service could carry it) is refused naming metadata.name" \
  refused metadata.name 1pvc '{}'
check "a name longer than 63 characters is refused naming metadata.name" \
  refused metadata.name "v$(printf '%063d' 0)" '{}'
check "a flag that is not --name[=value] is refused naming spec.daemonFlags[0]" \
  refused 'spec.daemonFlags[0]' pvc-c '{daemonFlags: ["stop-timeout 10s"]}'
check "a flag longer than 1024 characters is refused naming spec.daemonFlags[0]" \
  refused 'spec.daemonFlags[0]' pvc-c "{daemonFlags: [\"--x=$(printf '%01030d' 0)\"]}"
check "more than 64 flags are refused naming spec.daemonFlags" \
  refused spec.daemonFlags pvc-c "{daemonFlags: [$(printf '"--x",%.0s' {1..65})\"--y\"]}"
check "serve that is not a boolean is refused naming spec.serve" \
  refused spec.serve pvc-c '{serve: "yes"}'

# The status is the controller's: written through /status only.
k -n "$ns" patch smgr pvc-a --type merge -p '{"status":{"phase":"RUNNING"}}' >/dev/null 2>&1
check "a status written through the object itself is dropped" \
  test -z "$(k -n "$ns" get smgr pvc-a -o jsonpath='{.status.phase}')"
k -n "$ns" patch smgr pvc-a --subresource=status --type merge \
  -p '{"status":{"phase":"RUNNING","epoch":3,"pod":"pvc-a-e3"}}' >/dev/null
check "a status written through /status stays" \
  test "$(k -n "$ns" get smgr pvc-a -o jsonpath='{.status.phase} {.status.epoch}')" = "RUNNING 3"
check "a status write leaves metadata.generation alone" \
  test "$(k -n "$ns" get smgr pvc-a -o jsonpath='{.metadata.generation}')" = 1
k -n "$ns" patch smgr pvc-a --type merge -p '{"spec":{"serve":false}}' >/dev/null
check "a spec write moves metadata.generation" \
  test "$(k -n "$ns" get smgr pvc-a -o jsonpath='{.metadata.generation}')" = 2
status_refused() { # status_refused WHAT PATCH: the status write fails, naming WHAT
  local out
  if out=$(k -n "$ns" patch smgr pvc-a --subresource=status --type merge -p "$2" 2>&1); then
    echo "written: $2"
    return 1
  fi
  grep -qF -- "$1" <<<"$out" || {
    echo "error does not name $1: $out"
    return 1
  }
}
check "an unknown phase is refused naming status.phase" \
  status_refused status.phase '{"status":{"phase":"RUNNIN"}}'
check "a condition without a reason is refused naming it" \
  status_refused 'status.conditions[0].reason' \
  '{"status":{"conditions":[{"type":"Healthy","status":"True","reason":"","lastTransitionTime":"2026-12-02T01:02:03.004Z"}]}}'

header=$(k -n "$ns" get smgr 2>&1 | head -1)
check "kubectl get shows phase, epoch, pod, rolling and age ($header)" \
  grep -qE '^NAME +PHASE +EPOCH +POD +ROLLING +AGE$' <<<"$header"
check "kubectl get shows the values" \
  grep -qE '^pvc-a +RUNNING +3 +pvc-a-e3 ' <<<"$(k -n "$ns" get smgr pvc-a --no-headers)"
finish
