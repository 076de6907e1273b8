// The client and the informer on a real kube-apiserver: the single-node test
// cluster (tests/k8s/cluster.sh) whose environment is $SHAREMGR_K8S_DIR/env.
// Each case works on ConfigMaps in a namespace of its own, deleted after it.
#include <doctest/doctest.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "kube/api_error.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"
#include "kube/paths.h"
#include "tests/kube/recorder.h"
#include "tests/kube/test_cluster.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"
#include "tests/support/wait_for.h"

namespace kube {
namespace {

using testing::AdminConfig;
using testing_support::RequireOk;
using testing_support::WaitFor;

constexpr auto kWait = std::chrono::seconds(30);

std::string ConfigMaps(const std::string& ns, const std::string& name = "") {
  return ResourcePath(
      {.version = "v1", .namespace_name = ns, .plural = "configmaps", .name = name});
}

// Every namespace has a ConfigMap of Kubernetes' own (kube-root-ca.crt): the
// cases look only at theirs, which carry this label.
constexpr char kOurs[] = "kube-client-test=yes";

nlohmann::json ConfigMap(const std::string& name, const std::string& value,
                         nlohmann::json labels = nlohmann::json::object()) {
  labels["kube-client-test"] = "yes";
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"data", {{"value", value}}}};
}

std::string Version(const nlohmann::json& object) {
  return object["metadata"]["resourceVersion"].get<std::string>();
}

// The informer's reports, with the objects' data.value.
struct Recorder : testing_support::InformerRecorder {
  Recorder()
      : InformerRecorder([](const nlohmann::json& object) {
          return object["data"]["value"].get<std::string>();
        }) {}
};

std::unique_ptr<Informer> StartInformer(Client& client, InformerOptions options,
                                        Recorder& recorder) {
  auto informer = std::make_unique<Informer>(
      client, std::move(options), [&recorder](const std::string& key) { recorder(key); });
  recorder.Attach(informer.get());
  informer->Start();
  return informer;
}

TEST_CASE("apiserver: create, get, replace, with the apiserver's concurrency and preconditions") {
  auto client = RequireOk(Client::Create(AdminConfig()));
  testing::TestNamespace ns(*client, "kube-client-test");
  const auto created = RequireOk(client->Create(ConfigMaps(ns.name()), ConfigMap("a", "1")));
  CHECK(created["data"]["value"] == "1");
  auto got = RequireOk(client->Get(ConfigMaps(ns.name(), "a")));
  CHECK(Version(got) == Version(created));

  const auto twice = client->Create(ConfigMaps(ns.name()), ConfigMap("a", "again"));
  CHECK(absl::IsAlreadyExists(twice.status()));
  CHECK(absl::StrContains(twice.status().message(), "already exists"));

  got["data"]["value"] = "2";
  const auto replaced = RequireOk(client->Replace(ConfigMaps(ns.name(), "a"), got));
  CHECK(replaced["data"]["value"] == "2");
  // `got` still carries the version before the replace.
  got["data"]["value"] = "stale";
  const auto stale = client->Replace(ConfigMaps(ns.name(), "a"), got);
  CHECK(absl::IsAborted(stale.status()));
  CHECK(absl::StrContains(stale.status().message(), "PUT /api/v1/namespaces/"));

  const auto patched =
      RequireOk(client->MergePatch(ConfigMaps(ns.name(), "a"), {{"data", {{"extra", "x"}}}}));
  CHECK(patched["data"]["value"] == "2");
  CHECK(patched["data"]["extra"] == "x");

  const auto wrong_uid =
      client->Delete(ConfigMaps(ns.name(), "a"), {.uid = "00000000-0000-0000-0000-000000000000"});
  CHECK(absl::IsAborted(wrong_uid.status()));
  CHECK(RequireOk(client->Get(ConfigMaps(ns.name(), "a")))["data"]["value"] == "2");
  RequireOk(client->Delete(
      ConfigMaps(ns.name(), "a"),
      {.uid = patched["metadata"]["uid"].get<std::string>(), .grace_period_seconds = 0}));
  CHECK(absl::IsNotFound(client->Get(ConfigMaps(ns.name(), "a")).status()));

  const auto invalid = client->Create(ConfigMaps(ns.name()), ConfigMap("Not_Valid", "1"));
  CHECK(absl::IsInvalidArgument(invalid.status()));
  CHECK(absl::StrContains(invalid.status().message(), "metadata.name"));
}

TEST_CASE("apiserver: a watch sees ADDED, MODIFIED, DELETED in order") {
  auto client = RequireOk(Client::Create(AdminConfig()));
  testing::TestNamespace ns(*client, "kube-client-test");
  const ListResult empty = RequireOk(client->List(ConfigMaps(ns.name()), kOurs));
  CHECK(empty.items.empty());
  RequireOk(client->Create(ConfigMaps(ns.name()), ConfigMap("w", "1")));
  RequireOk(client->MergePatch(ConfigMaps(ns.name(), "w"), {{"data", {{"value", "2"}}}}));
  RequireOk(client->Delete(ConfigMaps(ns.name(), "w")));
  Cancellation cancel;
  std::vector<std::string> seen;
  // From the list's version: the three changes after it, then the apiserver's
  // timeout ends the watch.
  const absl::Status status = client->Watch(
      ConfigMaps(ns.name()),
      {.resource_version = empty.resource_version,
       .timeout = std::chrono::seconds(2),
       .label_selector = kOurs},
      [&](const WatchEvent& event) {
        seen.push_back(event.type + " " + event.object["data"]["value"].get<std::string>());
      },
      cancel);
  CHECK(status.ok());
  CHECK(seen == std::vector<std::string>{"ADDED 1", "MODIFIED 2", "DELETED 2"});
}

TEST_CASE("apiserver: the informer lists, watches, and resumes after the watch's timeout") {
  auto client = RequireOk(Client::Create(AdminConfig()));
  testing::TestNamespace ns(*client, "kube-client-test");
  RequireOk(client->Create(ConfigMaps(ns.name()), ConfigMap("before", "0")));
  Recorder recorder;
  auto informer = StartInformer(*client,
                                {.path = ConfigMaps(ns.name()),
                                 .label_selector = kOurs,
                                 .watch_timeout = std::chrono::seconds(1)},
                                recorder);
  REQUIRE(informer->WaitForSync(absl::Seconds(30)));
  CHECK(recorder.seen() == std::vector<std::string>{ns.name() + "/before@0"});

  RequireOk(client->Create(ConfigMaps(ns.name()), ConfigMap("after", "0")));
  // Changes across several of the apiserver's watch timeouts: every one seen.
  const int watches_before = static_cast<int>(informer->counters().watches);
  int value = 0;
  while (informer->counters().watches < watches_before + 3) {
    REQUIRE(value < 1000);
    RequireOk(client->MergePatch(ConfigMaps(ns.name(), "after"),
                                 {{"data", {{"value", std::to_string(++value)}}}}));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string last = ns.name() + "/after@" + std::to_string(value);
  REQUIRE(WaitFor([&] { return recorder.Saw(last); }, kWait));
  std::vector<std::string> expected = {ns.name() + "/before@0"};
  for (int i = 0; i <= value; ++i) expected.push_back(ns.name() + "/after@" + std::to_string(i));
  CHECK(recorder.seen() == expected);
  const InformerCounters counters = informer->counters();
  CHECK(counters.lists == 1);
  CHECK(counters.relists_on_gone == 0);
  CHECK(counters.failures == 0);
  CHECK(informer->List().size() == 2);

  // Stopped while its watch waits on the apiserver: it returns before any
  // timeout could have ended that watch.
  auto quiet = StartInformer(*client,
                             {.path = ConfigMaps(ns.name()),
                              .label_selector = kOurs,
                              .watch_timeout = std::chrono::seconds(300)},
                             recorder);
  REQUIRE(quiet->WaitForSync(absl::Seconds(30)));
  REQUIRE(WaitFor([&] { return quiet->counters().watches == 1; }, kWait));
  const auto before = std::chrono::steady_clock::now();
  quiet->Stop();
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(300));
  informer->Stop();
  const size_t reported = recorder.seen().size();
  RequireOk(client->MergePatch(ConfigMaps(ns.name(), "after"), {{"data", {{"value", "late"}}}}));
  CHECK(testing_support::HoldsFor([&] { return recorder.seen().size() == reported; },
                                  std::chrono::milliseconds(500)));
}

// A service account's token, given RBAC to read the namespace's ConfigMaps
// (Grant) and not (Revoke): an informer that loses its watch on demand.
class Reader {
 public:
  Reader(Client& admin, const std::string& ns, const std::string& token_file)
      : admin_(admin), ns_(ns) {
    RequireOk(admin_.Create(
        ResourcePath({.version = "v1", .namespace_name = ns, .plural = "serviceaccounts"}),
        {{"metadata", {{"name", "reader"}}}}));
    RequireOk(admin_.Create(ResourcePath({.group = "rbac.authorization.k8s.io",
                                          .version = "v1",
                                          .namespace_name = ns,
                                          .plural = "roles"}),
                            {{"metadata", {{"name", "reader"}}},
                             {"rules",
                              {{{"apiGroups", {""}},
                                {"resources", {"configmaps"}},
                                {"verbs", {"get", "list", "watch"}}}}}}));
    const auto token = RequireOk(admin_.Create(ResourcePath({.version = "v1",
                                                             .namespace_name = ns,
                                                             .plural = "serviceaccounts",
                                                             .name = "reader",
                                                             .subresource = "token"}),
                                               {{"apiVersion", "authentication.k8s.io/v1"},
                                                {"kind", "TokenRequest"},
                                                {"spec", {{"expirationSeconds", 600}}}}));
    REQUIRE(
        base::WriteFileAtomically(token_file, token["status"]["token"].get<std::string>()).ok());
  }
  void Grant() {
    RequireOk(admin_.Create(
        Bindings(),
        {{"metadata", {{"name", "reader"}}},
         {"subjects", {{{"kind", "ServiceAccount"}, {"name", "reader"}, {"namespace", ns_}}}},
         {"roleRef",
          {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "reader"}}}}));
  }
  void Revoke() { RequireOk(admin_.Delete(Bindings() + "/reader")); }

 private:
  std::string Bindings() const {
    return ResourcePath({.group = "rbac.authorization.k8s.io",
                         .version = "v1",
                         .namespace_name = ns_,
                         .plural = "rolebindings"});
  }
  Client& admin_;
  const std::string ns_;
};

TEST_CASE("apiserver: after 410 the informer lists again and reports what changed meanwhile") {
  const ClientConfig admin_config = AdminConfig();
  auto admin = RequireOk(Client::Create(admin_config));
  testing::TestNamespace ns(*admin, "kube-client-test");
  testing_support::TempDir dir;
  Reader reader(*admin, ns.name(), dir.path() + "/token");
  reader.Grant();
  const nlohmann::json watched = {{"watched", "yes"}};
  RequireOk(admin->Create(ConfigMaps(ns.name()), ConfigMap("deleted", "0", watched)));
  RequireOk(admin->Create(ConfigMaps(ns.name()), ConfigMap("changed", "0", watched)));
  RequireOk(admin->Create(ConfigMaps(ns.name()), ConfigMap("flood", "0")));

  // The token file, read again for every request.
  auto reader_client = RequireOk(Client::Create({.server = admin_config.server,
                                                 .ca_pem = admin_config.ca_pem,
                                                 .token_file = dir.path() + "/token"}));
  Recorder recorder;
  auto informer = StartInformer(*reader_client,
                                {.path = ConfigMaps(ns.name()),
                                 .label_selector = "watched=yes",
                                 .watch_timeout = std::chrono::seconds(1)},
                                recorder);
  REQUIRE(informer->WaitForSync(absl::Seconds(30)));
  CHECK(informer->List().size() == 2);

  // Its next watch is refused (403, backed off and retried): it follows
  // nothing from here on.
  reader.Revoke();
  REQUIRE(WaitFor([&] { return informer->counters().failures >= 1; }, kWait));
  RequireOk(admin->Delete(ConfigMaps(ns.name(), "deleted")));
  RequireOk(admin->MergePatch(ConfigMaps(ns.name(), "changed"), {{"data", {{"value", "1"}}}}));
  RequireOk(admin->Create(ConfigMaps(ns.name()), ConfigMap("added", "0", watched)));
  // Writes (not watched) until the apiserver no longer has the history from
  // here on: a watch from now is Gone, so is one from where the informer is.
  // Its watch cache keeps every event younger than 75 s (growing for them),
  // so this takes up to a few minutes of writes.
  const std::string now = RequireOk(admin->List(ConfigMaps(ns.name()))).resource_version;
  Cancellation cancel;
  absl::Status watch_from_now;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  for (int round = 0; !IsGone(watch_from_now) && std::chrono::steady_clock::now() < give_up;
       ++round) {
    for (int i = 0; i < 100; ++i) {
      RequireOk(admin->MergePatch(ConfigMaps(ns.name(), "flood"),
                                  {{"data", {{"value", absl::StrCat(round, "-", i)}}}}));
    }
    watch_from_now = admin->Watch(
        ConfigMaps(ns.name()),
        {.resource_version = now,
         .timeout = std::chrono::seconds(1),
         .label_selector = "watched=yes"},
        [](const WatchEvent&) {}, cancel);
  }
  REQUIRE_MESSAGE(IsGone(watch_from_now), "the apiserver still has the history from ", now, ": ",
                  watch_from_now.ToString());

  reader.Grant();
  REQUIRE(WaitFor(
      [&] {
        return informer->counters().relists_on_gone >= 1 && recorder.Saw(ns.name() + "/added@0");
      },
      kWait));
  CHECK(recorder.Saw(ns.name() + "/deleted deleted"));
  CHECK(recorder.Saw(ns.name() + "/changed@1"));
  CHECK_FALSE(informer->Get(ns.name() + "/deleted").has_value());
  CHECK(informer->List().size() == 2);
  CHECK(informer->counters().lists == 2);
}

TEST_CASE("apiserver: a wrong CA is a TLS error, a bad token Unauthenticated") {
  const ClientConfig admin_config = AdminConfig();
  testing_support::TempDir dir;
  const testing_support::TestCa other_ca(dir.path(), "other");
  auto wrong_ca = RequireOk(Client::Create(
      {.server = admin_config.server, .ca_pem = RequireOk(base::ReadFile(other_ca.cert()))}));
  const auto untrusted = wrong_ca->Get("/api/v1/namespaces/default");
  CHECK(absl::IsUnavailable(untrusted.status()));
  CHECK(absl::StrContains(untrusted.status().message(), "TLS"));
  CHECK(absl::StrContains(untrusted.status().message(), "certificate"));

  auto bad_token = RequireOk(Client::Create(
      {.server = admin_config.server, .ca_pem = admin_config.ca_pem, .token = "not-a-token"}));
  const auto refused = bad_token->Get("/api/v1/namespaces/default");
  CHECK(absl::IsUnauthenticated(refused.status()));
  CHECK(absl::StrContains(refused.status().message(), "GET /api/v1/namespaces/default"));
}

}  // namespace
}  // namespace kube
