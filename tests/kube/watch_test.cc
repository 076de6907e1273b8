// A watch's stream as the apiserver frames it (one JSON event a line) and as
// the transport cuts it: lines split across reads, several in one, a stream
// cut in the middle of one; and a watch cancelled while the stream is quiet.
#include <doctest/doctest.h>

#include <thread>

#include "kube/api_error.h"
#include "kube/client.h"
#include "kube/watch_lines.h"
#include "tests/kube/fake_apiserver.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace kube {
namespace {

using testing_support::FakeApiserver;
using testing_support::FakeReply;
using testing_support::RequireOk;

std::string Event(const std::string& type, const std::string& name, const std::string& version) {
  return nlohmann::json{{"type", type},
                        {"object", {{"metadata", {{"name", name}, {"resourceVersion", version}}}}}}
             .dump() +
         "\n";
}

std::unique_ptr<Client> ClientOf(const FakeApiserver& server) {
  return RequireOk(Client::Create({.server = server.url()}));
}

TEST_CASE("watch lines: split anywhere, several at once, empty ones dropped") {
  LineSplitter lines;
  CHECK(lines.Feed("{\"a\":").empty());
  CHECK(lines.pending() == 5);
  CHECK(lines.Feed("1}\n{\"b\":2}\n\n{\"c\"") ==
        std::vector<std::string>{"{\"a\":1}", "{\"b\":2}"});
  CHECK(lines.Feed(":3}\n") == std::vector<std::string>{"{\"c\":3}"});
  CHECK(lines.pending() == 0);
}

TEST_CASE("watch lines: an event needs a type and an object") {
  const WatchEvent event = RequireOk(ParseWatchEvent(Event("ADDED", "a", "7")));
  CHECK(event.type == "ADDED");
  CHECK(event.object["metadata"]["name"] == "a");
  CHECK(absl::IsInvalidArgument(ParseWatchEvent("{\"type\":\"ADDED\"}").status()));
  CHECK(absl::IsInvalidArgument(ParseWatchEvent("not json").status()));
}

TEST_CASE("watch: events split across chunks and packed in one arrive whole, in order") {
  const std::string added = Event("ADDED", "a", "11");
  const std::string modified = Event("MODIFIED", "a", "12");
  FakeApiserver server([&](const std::string&) {
    return FakeReply{.chunks = {added.substr(0, 10), added.substr(10) + modified,
                                Event("BOOKMARK", "", "13") + Event("DELETED", "a", "14")}};
  });
  auto client = ClientOf(server);
  Cancellation cancel;
  std::vector<std::string> seen;
  const absl::Status status = client->Watch(
      "/api/v1/namespaces/ns/configmaps",
      {.resource_version = "10",
       .allow_bookmarks = true,
       .timeout = std::chrono::seconds(5),
       .label_selector = "app=x,tier in (a)"},
      [&](const WatchEvent& event) {
        seen.push_back(event.type + " " +
                       event.object["metadata"]["resourceVersion"].get<std::string>());
      },
      cancel);
  CHECK(status.ok());
  CHECK(seen == std::vector<std::string>{"ADDED 11", "MODIFIED 12", "BOOKMARK 13", "DELETED 14"});
  REQUIRE(server.requests().size() == 1);
  CHECK(server.requests()[0] ==
        "GET /api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=10&allowWatchBookmarks=true"
        "&timeoutSeconds=5&labelSelector=app%3Dx%2Ctier%20in%20%28a%29");
}

TEST_CASE("watch: a stream cut in the middle of an event is a failure, the half event dropped") {
  const std::string modified = Event("MODIFIED", "a", "12");
  FakeApiserver server([&](const std::string&) {
    return FakeReply{.chunks = {Event("ADDED", "a", "11") + modified.substr(0, 15)}, .cut = true};
  });
  auto client = ClientOf(server);
  Cancellation cancel;
  std::vector<std::string> seen;
  const absl::Status status = client->Watch(
      "/w", {}, [&](const WatchEvent& event) { seen.push_back(event.type); }, cancel);
  CHECK(absl::IsUnavailable(status));
  CHECK(seen == std::vector<std::string>{"ADDED"});
}

TEST_CASE("watch: an ERROR event ends it with its Status, and a 410 answer is Gone too") {
  const std::string error = nlohmann::json{{"type", "ERROR"},
                                           {"object",
                                            {{"kind", "Status"},
                                             {"message", "too old resource version: 1 (331)"},
                                             {"reason", "Expired"},
                                             {"code", 410}}}}
                                .dump() +
                            "\n";
  FakeApiserver server([&](const std::string& request) {
    if (request.find("resourceVersion=1&") != std::string::npos) {
      return FakeReply{.chunks = {error}, .hold = true};
    }
    return FakeReply{.status = 410, .chunks = {nlohmann::json::parse(error)["object"].dump()}};
  });
  auto client = ClientOf(server);
  Cancellation cancel;
  std::vector<std::string> seen;
  const auto on_event = [&](const WatchEvent& event) { seen.push_back(event.type); };
  const absl::Status in_stream = client->Watch("/w", {.resource_version = "1"}, on_event, cancel);
  CHECK(IsGone(in_stream));
  CHECK(in_stream.message().find("too old resource version") != std::string::npos);
  CHECK(seen == std::vector<std::string>{"ERROR"});
  CHECK(IsGone(client->Watch("/w", {.resource_version = "2"}, on_event, cancel)));
}

TEST_CASE("watch: cancelled while the stream is quiet, it returns at once") {
  FakeApiserver server([](const std::string&) { return FakeReply{.hold = true}; });
  auto client = ClientOf(server);
  Cancellation cancel;
  absl::Status status;
  // The watch would last 300 s (+30 s) if the cancellation did not end it.
  std::thread watcher([&] {
    status = client->Watch(
        "/w", {}, [](const WatchEvent&) {}, cancel);
  });
  REQUIRE(testing_support::WaitFor([&] { return server.requests().size() == 1; },
                                   std::chrono::seconds(10)));
  cancel.Cancel();
  watcher.join();
  CHECK(absl::IsCancelled(status));
  CHECK(testing_support::WaitFor([&] { return server.clients_gone() == 1; },
                                 std::chrono::seconds(10)));
  // Cancelled for good: the next call does not start.
  CHECK(absl::IsCancelled(client->List("/l", "", &cancel).status()));
  CHECK(server.requests().size() == 1);
}

}  // namespace
}  // namespace kube
