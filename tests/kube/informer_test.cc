// The informer against a scripted apiserver, for what a real one does not do
// on demand: a watch cut in the middle of an event, a 410 on the watch, lists
// that fail a while, and a watch that stays silent when it is stopped.
#include "kube/informer.h"

#include <doctest/doctest.h>

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "tests/kube/fake_apiserver.h"
#include "tests/kube/recorder.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace kube {
namespace {

using testing_support::FakeApiserver;
using testing_support::FakeReply;
using testing_support::RequireOk;
using testing_support::WaitFor;

constexpr char kPath[] = "/api/v1/namespaces/ns/configmaps";
constexpr auto kWait = std::chrono::seconds(10);

nlohmann::json Object(const std::string& name, const std::string& version) {
  return {{"metadata", {{"name", name}, {"namespace", "ns"}, {"resourceVersion", version}}}};
}

std::string ListOf(const std::string& version, const std::vector<nlohmann::json>& items) {
  return nlohmann::json{
      {"kind", "ConfigMapList"}, {"metadata", {{"resourceVersion", version}}}, {"items", items}}
      .dump();
}

std::string Event(const std::string& type, const nlohmann::json& object) {
  return nlohmann::json{{"type", type}, {"object", object}}.dump() + "\n";
}

bool IsList(const std::string& request) { return request.find("watch=1") == std::string::npos; }

// The informer's reports, with the objects' resourceVersion.
struct Recorder : testing_support::InformerRecorder {
  Recorder()
      : InformerRecorder([](const nlohmann::json& object) {
          return object["metadata"]["resourceVersion"].get<std::string>();
        }) {}
};

struct Harness {
  explicit Harness(FakeApiserver::Reply reply)
      : server(std::move(reply)), client(RequireOk(Client::Create({.server = server.url()}))) {}
  std::unique_ptr<Informer> Start(InformerOptions options = {}) {
    options.path = kPath;
    auto informer = std::make_unique<Informer>(*client, options,
                                               [this](const std::string& key) { recorder(key); });
    recorder.Attach(informer.get());
    informer->Start();
    return informer;
  }
  FakeApiserver server;
  std::unique_ptr<Client> client;
  Recorder recorder;
};

TEST_CASE("informer: a watch cut mid-event is watched again from the last version, no re-list") {
  const std::string modified = Event("MODIFIED", Object("b", "12"));
  std::atomic<int> watches = 0;
  Harness harness([&](const std::string& request) {
    if (IsList(request)) return FakeReply{.chunks = {ListOf("10", {Object("a", "10")})}};
    if (watches++ == 0) {
      return FakeReply{.chunks = {Event("ADDED", Object("b", "11")) + modified.substr(0, 20)},
                       .cut = true};
    }
    return FakeReply{.chunks = {modified}, .hold = true};
  });
  auto informer = harness.Start();
  REQUIRE(WaitFor([&] { return harness.recorder.seen().size() == 3; }, kWait));
  CHECK(harness.recorder.seen() == std::vector<std::string>{"ns/a@10", "ns/b@11", "ns/b@12"});
  const auto requests = harness.server.requests();
  REQUIRE(requests.size() == 3);
  CHECK(IsList(requests[0]));
  CHECK(requests[1].find("resourceVersion=10&allowWatchBookmarks=true") != std::string::npos);
  CHECK(requests[2].find("resourceVersion=11&") != std::string::npos);
  const InformerCounters counters = informer->counters();
  CHECK(counters.lists == 1);
  CHECK(counters.watches == 2);
  CHECK(counters.failures == 1);
  CHECK(counters.events == 2);
  CHECK(informer->List().size() == 2);
}

TEST_CASE("informer: 410 on the watch: listed again, every difference reported, deletes too") {
  for (const bool in_stream : {true, false}) {
    CAPTURE(in_stream);
    const nlohmann::json gone = {{"kind", "Status"},
                                 {"code", 410},
                                 {"reason", "Expired"},
                                 {"message", "too old resource version: 10 (20)"}};
    std::atomic<int> lists = 0;
    Harness harness([&](const std::string& request) {
      if (IsList(request)) {
        if (lists++ == 0) {
          return FakeReply{
              .chunks = {ListOf("10", {Object("a", "9"), Object("b", "10"), Object("same", "5")})}};
        }
        return FakeReply{
            .chunks = {ListOf("30", {Object("a", "25"), Object("c", "30"), Object("same", "5")})}};
      }
      if (request.find("resourceVersion=10&") != std::string::npos) {
        if (in_stream) return FakeReply{.chunks = {Event("ERROR", gone)}, .hold = true};
        return FakeReply{.status = 410, .chunks = {gone.dump()}};
      }
      // BOOKMARK: moves the resume point without a change to report.
      return FakeReply{.chunks = {Event("BOOKMARK", Object("", "31"))}, .hold = true};
    });
    auto informer = harness.Start();
    REQUIRE(WaitFor([&] { return harness.server.requests().size() == 4; }, kWait));
    CHECK(harness.recorder.seen() == std::vector<std::string>{"ns/a@9", "ns/b@10", "ns/same@5",
                                                              "ns/a@25", "ns/c@30",
                                                              "ns/b deleted"});
    CHECK(harness.server.requests()[3].find("resourceVersion=30&") != std::string::npos);
    CHECK(informer->counters().relists_on_gone == 1);
    CHECK(informer->counters().lists == 2);
    CHECK_FALSE(informer->Get("ns/b").has_value());
    informer->Stop();
    CHECK(informer->counters().events == 0);
  }
}

TEST_CASE("informer: an answer that is no list (after a 410) deletes nothing, and is retried") {
  const nlohmann::json gone = {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}};
  std::atomic<int> lists = 0;
  Harness harness([&](const std::string& request) {
    if (IsList(request)) {
      switch (lists++) {
        case 0:
          return FakeReply{.chunks = {ListOf("10", {Object("a", "9")})}};
        case 1:  // a misrouted answer: a 200 that is no list at all
          return FakeReply{.chunks = {"{}"}};
        case 2:  // a list without its version: a watch from it would miss changes
          return FakeReply{
              .chunks = {nlohmann::json{{"kind", "ConfigMapList"}, {"items", {}}}.dump()}};
        default:
          return FakeReply{.chunks = {ListOf("30", {Object("a", "9")})}};
      }
    }
    if (request.find("resourceVersion=10&") != std::string::npos) {
      return FakeReply{.status = 410, .chunks = {gone.dump()}};
    }
    return FakeReply{.chunks = {}, .hold = true};
  });
  auto informer = harness.Start();
  REQUIRE(WaitFor([&] { return lists.load() >= 4; }, kWait));
  REQUIRE(WaitFor([&] { return informer->counters().lists == 2; }, kWait));
  CHECK(harness.recorder.seen() == std::vector<std::string>{"ns/a@9"});  // never "deleted"
  CHECK(informer->Get("ns/a").has_value());
  CHECK(informer->counters().failures >= 2);
  informer->Stop();
}

TEST_CASE("informer: a failing list is retried after growing, jittered waits, then syncs") {
  std::atomic<int> lists = 0;
  Harness harness([&](const std::string& request) {
    if (IsList(request)) {
      if (lists++ < 3)
        return FakeReply{.status = 500, .chunks = {"{\"kind\":\"Status\",\"code\":500}"}};
      return FakeReply{.chunks = {ListOf("10", {Object("a", "10")})}};
    }
    return FakeReply{.hold = true};
  });
  auto informer = harness.Start({.backoff_initial = std::chrono::milliseconds(100),
                                 .backoff_max = std::chrono::milliseconds(400)});
  CHECK_FALSE(informer->HasSynced());
  REQUIRE(informer->WaitForSync(absl::Seconds(10)));
  CHECK(harness.recorder.seen() == std::vector<std::string>{"ns/a@10"});
  CHECK(informer->counters().failures == 3);
  // The client counts what it sent: 4 lists (GET), then one held watch.
  REQUIRE(WaitFor([&] { return harness.client->RequestCounts().contains("WATCH"); }, kWait));
  CHECK(harness.client->RequestCounts() ==
        std::map<std::string, int64_t>{{"GET", 4}, {"WATCH", 1}});
  const auto times = harness.server.times();
  REQUIRE(times.size() >= 4);
  // Each wait is at least half its ceiling (100, 200, 400 ms).
  CHECK(times[1] - times[0] >= std::chrono::milliseconds(50));
  CHECK(times[2] - times[1] >= std::chrono::milliseconds(100));
  CHECK(times[3] - times[2] >= std::chrono::milliseconds(200));
}

TEST_CASE("informer: healthy once listed, not while its watch fails, again at the next event") {
  std::atomic<int> lists = 0;
  std::atomic<int> watches = 0;
  std::atomic<bool> apiserver_back = false;
  Harness harness([&](const std::string& request) {
    if (IsList(request)) {
      if (lists++ == 0) return FakeReply{.status = 500, .chunks = {"{\"kind\":\"Status\"}"}};
      return FakeReply{.chunks = {ListOf("10", {Object("a", "10")})}};
    }
    if (watches++ == 0)
      return FakeReply{.chunks = {Event("ADDED", Object("b", "11"))}, .cut = true};
    if (!apiserver_back) return FakeReply{.status = 503, .chunks = {"{\"kind\":\"Status\"}"}};
    return FakeReply{.chunks = {Event("MODIFIED", Object("b", "12"))}, .hold = true};
  });
  auto informer = harness.Start({.backoff_initial = std::chrono::milliseconds(50),
                                 .backoff_max = std::chrono::milliseconds(100)});
  // The first list failed: why is said, with the collection.
  REQUIRE(WaitFor([&] { return lists >= 1; }, kWait));
  const absl::Status before = informer->Health();
  CHECK(before.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(before.message()).find(kPath) != std::string::npos);
  // Listed, then its watch cut and refused (503) again and again: unhealthy.
  REQUIRE(WaitFor([&] { return watches >= 3; }, kWait));
  CHECK_FALSE(informer->Health().ok());
  CHECK(informer->HasSynced());  // the cache stays, not current
  apiserver_back = true;
  REQUIRE(WaitFor([&] { return informer->Health().ok(); }, kWait));
  CHECK(harness.recorder.seen().back() == "ns/b@12");
}

TEST_CASE("informer: Stop ends a silent watch at once, and no handler runs after it") {
  Harness harness([&](const std::string& request) {
    if (IsList(request)) return FakeReply{.chunks = {ListOf("10", {Object("a", "10")})}};
    return FakeReply{.hold = true};
  });
  // The watch would last 300 s (+30 s) were it not cancelled.
  auto informer = harness.Start({.watch_timeout = std::chrono::seconds(300)});
  REQUIRE(WaitFor([&] { return harness.server.requests().size() == 2; }, kWait));
  const auto before = std::chrono::steady_clock::now();
  informer->Stop();
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(300));
  CHECK(WaitFor([&] { return harness.server.clients_gone() == 1; }, kWait));
  CHECK(harness.recorder.seen().size() == 1);
  CHECK(informer->HasSynced());
}

TEST_CASE("informer: the resync reports every cached object again") {
  Harness harness([&](const std::string& request) {
    if (IsList(request)) {
      return FakeReply{.chunks = {ListOf("10", {Object("a", "10"), Object("b", "10")})}};
    }
    // Ends at once: watched again after a backoff (no busy loop).
    return FakeReply{};
  });
  auto informer = harness.Start({.resync_period = std::chrono::seconds(1)});
  REQUIRE(WaitFor([&] { return harness.recorder.seen().size() >= 4; }, kWait));
  CHECK(harness.recorder.seen()[2] == "ns/a@10");
  CHECK(harness.recorder.seen()[3] == "ns/b@10");
  CHECK(informer->counters().lists == 1);
}

}  // namespace
}  // namespace kube
