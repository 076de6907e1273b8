#!/usr/bin/env bash
# Sets up, builds and runs every test: first the normal build (unit tests, then
# integration tests with real ganesha and a real NFS client, then the mutants
# that must die, then the container images built and run, then those images
# on a real single-node Kubernetes), then a Release build
# (build only: -O3 finds warnings the other builds do not), clang's
# thread-safety analysis (ABSL_GUARDED_BY), then the unit and integration
# suite again under AddressSanitizer + UBSan, then every fuzz target for a
# bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== build"
bash scripts/build.sh
echo "== unit tests"
ctest --test-dir build -L unit -j2 --output-on-failure
echo "== integration tests"
ctest --test-dir build -L integration -j2 --output-on-failure
echo "== mutants that must die (tests/mutants: each a plausible bug some test must catch)"
# The tests just passed on this source: no baseline run needed.
bash tests/mutants/run.sh --no-baseline

echo "== container images and manifests"
# The two images for this stage and the next, built once from a clean
# checkout of HEAD (one builder compiles both binaries).
image=localhost/share-manager:test-$$
controller_image=localhost/share-controller:test-$$
remove_images() {
  podman --storage-driver vfs rmi "$image" >/dev/null 2>&1 || true
  podman --storage-driver vfs rmi "$controller_image" >/dev/null 2>&1 || true
}
trap remove_images EXIT
bash container/build_head.sh "$image" "$controller_image"
SHARE_MANAGER_IMAGE=$image SHARE_CONTROLLER_IMAGE=$controller_image \
  ctest --test-dir build -L container --verbose --output-on-failure

echo "== Kubernetes: the pod on a real node (tests/k8s; one cluster for the stage)"
# The cluster's binaries are built once per version and cached outside the
# repository (tests/k8s/build_binaries.sh); the stage itself then takes minutes.
SHARE_MANAGER_IMAGE=$image SHARE_CONTROLLER_IMAGE=$controller_image \
  ctest --test-dir build -L k8s --output-on-failure

echo "== Release build (-O3, as packagers build; warnings are errors here)"
BUILD_DIR=build-release BUILD_TYPE=Release bash scripts/build.sh

echo "== thread-safety analysis (clang -Wthread-safety over every library and both binaries)"
cmake -S . -B build-tsa -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DBUILD_TESTING=OFF -DSHAREMGR_THREAD_SAFETY=ON >/dev/null
# Each library by name: one a binary stops linking is still analysed.
cmake --build build-tsa -j "${JOBS:-2}" \
  --target base child_process etcd_client kube_client supervisor metrics sharemgr controller \
  controller_metrics controller_testing controller_kubernetes \
  share-manager share-controller

echo "== AddressSanitizer + UBSan build"
BUILD_DIR=build-asan BUILD_TYPE=Debug bash scripts/build.sh -DSHAREMGR_SANITIZE=ON
echo "== all tests under ASan + UBSan"
# detect_leaks stays on: a leak fails the test.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -LE 'container|k8s' -j2 --output-on-failure

echo "== fuzzing (libFuzzer, ASan + UBSan: every parser of outside bytes, 20 s each from its seeds)"
bash tests/fuzz/run.sh
