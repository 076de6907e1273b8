// ClientOptions::write_gate: asked once per write as it goes out, never for a
// read; a refusal is the call's result and the apiserver sees nothing of the
// write (share-controller's replicas write only while they lead).
#include <doctest/doctest.h>

#include <atomic>

#include "kube/client.h"
#include "tests/kube/fake_apiserver.h"
#include "tests/support/require_ok.h"

namespace kube {
namespace {

using testing_support::FakeApiserver;
using testing_support::FakeReply;
using testing_support::RequireOk;

const nlohmann::json kObject = {{"metadata", {{"name", "a"}}}};

TEST_CASE("write gate: a refusal keeps every write off the wire, reads still go") {
  FakeApiserver server([](const std::string&) { return FakeReply{.chunks = {kObject.dump()}}; });
  std::atomic<int> asked{0};
  auto client = RequireOk(Client::Create({.server = server.url()}, {.write_gate = [&asked] {
                                           ++asked;
                                           return absl::FailedPreconditionError("not leader");
                                         }}));
  const std::string path = "/api/v1/namespaces/ns/configmaps/a";
  const auto created = client->Create("/api/v1/namespaces/ns/configmaps", kObject);
  CHECK(absl::IsFailedPrecondition(created.status()));
  CHECK(created.status().message() ==
        "POST /api/v1/namespaces/ns/configmaps: not sent: not leader");
  CHECK(absl::IsFailedPrecondition(client->Replace(path, kObject).status()));
  CHECK(absl::IsFailedPrecondition(client->MergePatch(path, kObject).status()));
  CHECK(absl::IsFailedPrecondition(client->Delete(path).status()));
  CHECK(asked == 4);
  CHECK(server.requests().empty());

  CHECK(RequireOk(client->Get(path)) == kObject);
  CHECK(asked == 4);
  CHECK(server.requests() == std::vector<std::string>{"GET " + path});
}

TEST_CASE(
    "write gate: asked per write, so a replica deposed between two is stopped at the second") {
  FakeApiserver server([](const std::string&) { return FakeReply{.chunks = {kObject.dump()}}; });
  std::atomic<bool> leading{true};
  auto client = RequireOk(Client::Create({.server = server.url()}, {.write_gate = [&leading] {
                                           return leading
                                                      ? absl::OkStatus()
                                                      : absl::FailedPreconditionError("deposed");
                                         }}));
  const std::string path = "/api/v1/namespaces/ns/configmaps/a";
  CHECK(RequireOk(client->Replace(path, kObject)) == kObject);
  leading = false;
  CHECK(absl::IsFailedPrecondition(client->Replace(path, kObject).status()));
  CHECK(server.requests() == std::vector<std::string>{"PUT " + path});
}

}  // namespace
}  // namespace kube
