// EtcdStore on a real 3-member etcd cluster: the Store contract every store
// keeps, and what only etcd brings (members dying, compaction, several
// controllers writing, the write guard, TLS).
#include "controller/store/etcd_store.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <thread>

#include "base/loopback_port.h"
#include "tests/controller/store/store_contract.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/etcd_keys.h"
#include "tests/support/require_ok.h"
#include "tests/support/test_certs.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

using store_contract::Heard;
using store_contract::Same;
using testing_support::EtcdCluster;
using testing_support::RequireOk;

std::shared_ptr<etcd::EtcdClient> Client(std::vector<std::string> endpoints,
                                         base::ClientSecurity security = {}) {
  return RequireOk(
      etcd::EtcdClient::Create({.endpoints = std::move(endpoints), .security = security}));
}

std::unique_ptr<EtcdStore> OpenStore(std::shared_ptr<etcd::EtcdClient> client) {
  return RequireOk(EtcdStore::Open(std::move(client), "/test"));
}

struct EtcdStoreFixture {
  EtcdCluster cluster;
  std::unique_ptr<EtcdStore> etcd = OpenStore(Client(cluster.endpoints()));
  Store& store() { return *etcd; }
};

// The names heard from the `from`-th on, as a set.
std::set<std::string> HeardFrom(const std::vector<std::string>& names, size_t from) {
  return {names.begin() + static_cast<ptrdiff_t>(std::min(from, names.size())), names.end()};
}

}  // namespace
}  // namespace controller

STORE_CONTRACT_TESTS(controller::EtcdStoreFixture, "EtcdStore");

namespace controller {

TEST_CASE("etcd: a watch whose member is SIGKILLed goes on on the next one, missing no change") {
  EtcdCluster cluster;
  // An endpoint nothing listens on first: the store moves past it at once.
  auto endpoints = cluster.endpoints();
  endpoints.insert(endpoints.begin(), "127.0.0.1:" + std::to_string(base::FreeLoopbackPort()));
  auto store = OpenStore(Client(endpoints));
  Heard heard;
  store->Watch(heard.Listener());
  REQUIRE(store->Create(ServedShare("before")).ok());
  REQUIRE(heard.Await(1) == std::vector<std::string>{"before"});
  REQUIRE(store->WatchEndpoint() == cluster.endpoint(0));

  cluster.Kill(0);
  // Through the same store, whose calls move on from the dead member too.
  REQUIRE(store->Create(ServedShare("after")).ok());
  CHECK(heard.Await(2) == std::vector<std::string>{"before", "after"});
  CHECK(testing_support::WaitFor(
      [&] {
        const auto now = store->WatchEndpoint();
        return now == cluster.endpoint(1) || now == cluster.endpoint(2);
      },
      std::chrono::seconds(10)));
}

TEST_CASE("etcd: a watch resumes where it stopped: changes made while its member was down arrive") {
  EtcdCluster cluster;
  // Its only member: the watch cannot move on, it must pick up after the restart.
  auto store = OpenStore(Client({cluster.endpoint(0)}));
  auto writer = OpenStore(Client({cluster.endpoint(1), cluster.endpoint(2)}));
  Heard heard;
  store->Watch(heard.Listener());
  REQUIRE(writer->Create(ServedShare("before")).ok());
  REQUIRE(heard.Await(1) == std::vector<std::string>{"before"});

  cluster.Kill(0);
  REQUIRE(writer->Create(ServedShare("during")).ok());
  REQUIRE(writer->Delete("before").ok());
  cluster.Restart(0);
  CHECK(heard.Await(3) == std::vector<std::string>{"before", "during", "before"});
}

TEST_CASE("etcd: after the history a watch needs is compacted, every name is reported again") {
  EtcdCluster cluster;
  auto writer_client = Client({cluster.endpoint(1), cluster.endpoint(2)});
  auto writer = OpenStore(writer_client);
  REQUIRE(writer->Create(ServedShare("steady")).ok());
  REQUIRE(writer->Create(ServedShare("doomed")).ok());
  auto store = OpenStore(Client({cluster.endpoint(0)}));
  Heard heard;
  store->Watch(heard.Listener());
  REQUIRE(writer->Create(ServedShare("before")).ok());
  REQUIRE(heard.Await(1) == std::vector<std::string>{"before"});

  cluster.Kill(0);
  REQUIRE(writer->Delete("doomed").ok());
  REQUIRE(writer->Create(ServedShare("during")).ok());
  etcdserverpb::CompactionRequest compact;
  compact.set_revision(testing_support::EtcdRevision(*writer_client));
  compact.set_physical(true);
  REQUIRE(writer_client->Compact(compact).ok());
  cluster.Restart(0);
  // The unchanged share too (only a listing finds it), and the one deleted
  // meanwhile (only the names known before find it).
  const std::set<std::string> all = {"before", "doomed", "during", "steady"};
  CHECK(HeardFrom(heard.Await(1 + all.size()), 1) == all);
}

TEST_CASE("etcd: concurrent read-modify-writes from several stores lose no update") {
  EtcdCluster cluster;
  constexpr int kWriters = 3, kIncrements = 15;
  std::vector<std::unique_ptr<EtcdStore>> stores;
  for (int i = 0; i < kWriters; ++i) stores.push_back(OpenStore(Client({cluster.endpoint(i)})));
  REQUIRE(stores[0]->Create(ServedShare("a")).ok());
  std::atomic<int> conflicts{0}, errors{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      for (int done = 0; done < kIncrements;) {
        auto record = stores[static_cast<size_t>(i)]->Get("a");
        if (!record.ok()) {
          ++errors;
          return;
        }
        record->mutable_status()->set_epoch(record->status().epoch() + 1);
        const auto written = stores[static_cast<size_t>(i)]->Update(*record);
        if (written.ok()) {
          ++done;
        } else if (IsConflict(written.status())) {
          ++conflicts;
        } else {
          ++errors;
          return;
        }
      }
    });
  }
  for (auto& w : writers) w.join();
  REQUIRE(errors == 0);
  CHECK(RequireOk(stores[0]->Get("a")).status().epoch() == kWriters * kIncrements);
  MESSAGE(conflicts.load(), " conflicts");
}

TEST_CASE("etcd: a write guard refuses every write once its key changed, as not leader") {
  EtcdCluster cluster;
  auto client = Client(cluster.endpoints());
  auto store = OpenStore(client);
  const std::string election = "/test-election/leader";
  etcdserverpb::PutRequest put;
  put.set_key(election);
  put.set_value("me");
  const int64_t elected = RequireOk(client->Put(put)).header().revision();
  store->SetWriteGuard(WriteGuard{.key = election, .revision = elected});
  auto a = RequireOk(store->Create(ServedShare("a")));
  a.mutable_status()->set_reason("while leading");
  a = RequireOk(store->Update(a));
  REQUIRE(store->Create(ServedShare("gone")).ok());
  REQUIRE(store->Delete("gone").ok());
  // Rewriting the key keeps its create_revision: still the same leader.
  put.set_value("me, again");
  REQUIRE(client->Put(put).ok());
  a = RequireOk(store->Update(a));

  SUBCASE("another leader") {
    etcdserverpb::DeleteRangeRequest del;
    del.set_key(election);
    REQUIRE(client->DeleteRange(del).ok());
    put.set_value("other");
    REQUIRE(client->Put(put).ok());
  }
  SUBCASE("no leader") {
    etcdserverpb::DeleteRangeRequest del;
    del.set_key(election);
    REQUIRE(client->DeleteRange(del).ok());
  }
  ShareRecord late = a;
  late.mutable_status()->set_reason("after losing");
  for (const absl::Status& refused :
       {store->Update(late).status(), store->Create(ServedShare("b")).status(),
        store->Delete("a")}) {
    CAPTURE(refused.ToString());
    CHECK(IsNotLeader(refused));
    CHECK_FALSE(IsConflict(refused));
    CHECK(refused.message().find("not leader") != absl::string_view::npos);
  }
  CHECK(Same(RequireOk(store->Get("a")), a));
  CHECK(store->Get("b").status().code() == absl::StatusCode::kNotFound);
  // A conflict is still a conflict first: a stale write is refused as one.
  ShareRecord stale = a;
  stale.set_resource_version(a.resource_version() - 1);
  CHECK(IsConflict(store->Update(stale).status()));

  store->SetWriteGuard(std::nullopt);
  CHECK(store->Update(late).ok());
}

TEST_CASE("etcd: a write guard on mod_revision refuses writes once its key is rewritten") {
  EtcdCluster cluster;
  auto client = Client(cluster.endpoints());
  auto store = OpenStore(client);
  etcdserverpb::PutRequest put;
  put.set_key("/test-fence");
  put.set_value("1");
  const int64_t written = RequireOk(client->Put(put)).header().revision();
  store->SetWriteGuard(WriteGuard{
      .key = "/test-fence", .field = WriteGuard::Field::kModRevision, .revision = written});
  REQUIRE(store->Create(ServedShare("a")).ok());
  put.set_value("2");
  REQUIRE(client->Put(put).ok());
  CHECK(IsNotLeader(store->Create(ServedShare("b")).status()));
}

TEST_CASE("etcd: over mutual TLS a store with a client certificate works, one without fails") {
  testing_support::TempDir certs;
  testing_support::TestCa ca(certs.path(), "etcd-ca");
  auto security = RequireOk(base::ResolveClientSecurity([&] {
    const auto cert = ca.Issue("controller", "controller", {"DNS:controller"});
    return base::TlsFlags{.cert = cert.cert, .key = cert.key, .ca = cert.ca};
  }()));
  EtcdCluster cluster({.members = 1,
                       .server_tls = ca.Issue("etcd", "etcd", {"IP:127.0.0.1"}),
                       .client_security = security});
  auto store = OpenStore(Client(cluster.endpoints(), security));
  Heard heard;
  store->Watch(heard.Listener());
  REQUIRE(store->Create(ServedShare("a")).ok());
  CHECK(heard.Await(1) == std::vector<std::string>{"a"});
  const auto plaintext = EtcdStore::Open(Client(cluster.endpoints()), "/test");
  CHECK(plaintext.status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace controller
