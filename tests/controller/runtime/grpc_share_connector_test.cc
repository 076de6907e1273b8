// GrpcShareConnector against a real gRPC server that answers with a fixed
// status: whose answer counts as the pod's, and where Mount may go.
#include "controller/runtime/grpc_share_connector.h"

#include <doctest/doctest.h>

#include "tests/controller/fake_share_manager.h"

namespace controller {
namespace {

const Pod kPod{.name = PodName("vol-a", 3),
               .volume = "vol-a",
               .epoch = 3,
               .phase = PodPhase::kRunning,
               .started_unix_ms = 1'700'000'000'000};

sharemanager::v1::ShareStatus Ours() {
  sharemanager::v1::ShareStatus status;
  status.set_state(sharemanager::v1::SERVING);
  status.set_volume(kPod.volume);
  status.set_epoch(kPod.epoch);
  status.set_started_unix_ms(kPod.started_unix_ms + 150);
  return status;
}

}  // namespace

TEST_CASE("connector: the pod's volume answering for another epoch is not health") {
  REQUIRE(ObserveWith(Ours(), kPod).reachable);
  auto older = Ours();
  older.set_epoch(kPod.epoch - 1);  // the previous server, still on the endpoint
  const auto seen = ObserveWith(older, kPod);
  CHECK_FALSE(seen.reachable);
  CHECK(seen.error.find("answered by volume 'vol-a' epoch 2") != std::string::npos);
}

TEST_CASE("connector: Mount is not sent to a share-manager that answers for another pod") {
  GrpcShareConnector connector({.deadline = std::chrono::milliseconds(2000)});
  {
    FixedServer ours(Ours());
    const auto handled = connector.Mount(ours.At(kPod), kPod.epoch, 4);
    REQUIRE_MESSAGE(handled.ok(), handled.status().ToString());
    CHECK(*handled == 4);
    CHECK(ours.service().mounts() == 1);
  }
  auto stranger = Ours();
  stranger.set_volume("vol-b");
  FixedServer theirs(stranger);
  const auto refused = connector.Mount(theirs.At(kPod), kPod.epoch, 5);
  CHECK(refused.status().code() == absl::StatusCode::kUnavailable);
  CHECK(refused.status().message().find("answered by volume 'vol-b'") != std::string::npos);
  CHECK(theirs.service().mounts() == 0);
}

}  // namespace controller
