// The serving lease end to end (issue #12): real share-managers on a real
// loop device, a real 3-member etcd cluster, a real NFS client. The keeper's
// timing on a fake clock is tests/sharemgr/serving_lease_test.cc.
#include <doctest/doctest.h>
#include <signal.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "etcd/client.h"
#include "sharemgr/etcd_lease_backend.h"
#include "sharemgr/exit_codes.h"
#include "supervisor/nfs_null_probe.h"
#include "tests/support/daemon_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/etcd_keys.h"
#include "tests/support/make_loop.h"
#include "tests/support/nfs_client.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::EtcdCluster;
using testing_support::EtcdGet;
using testing_support::HoldsFor;
using testing_support::KillPid;
using testing_support::LoopDevice;
using testing_support::MakeLoop;
using testing_support::RequireOk;
using testing_support::WaitFor;

// DaemonProcess's volume: every share-manager here serves the same one.
constexpr char kLeaseKey[] = "/sharemgr/leases/pvc-test";
constexpr char kEpochKey[] = "/sharemgr/epochs/pvc-test";

// What every case starts from: a 3-member etcd cluster, a client of it to
// look at the keys, an ext4 loop device. Declared before the daemons a case
// starts, so they stop before the device and the cluster go.
struct Fixture {
  EtcdCluster cluster;
  std::unique_ptr<etcd::EtcdClient> client =
      RequireOk(etcd::EtcdClient::Create({.endpoints = cluster.endpoints()}));
  std::unique_ptr<LoopDevice> loop = MakeLoop("ext4");

  // A share-manager of the volume on the loop device, under `epoch`.
  std::unique_ptr<DaemonProcess> Start(uint64_t epoch, const std::string& ttl,
                                       bool wait_until_serving = true) const {
    return RequireOk(DaemonProcess::Start(
        {.extra_flags = {"--device", loop->path(), "--fs", "ext4", "--epoch", std::to_string(epoch),
                         "--lease-etcd", absl::StrJoin(cluster.endpoints(), ","), "--lease-ttl",
                         ttl},
         .wait_until_serving = wait_until_serving}));
  }
};

// etcd's remaining TTL of a lease: -1 once it is gone (revoked or expired).
int64_t RemainingTtl(etcd::EtcdClient& client, int64_t lease) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  return RequireOk(client.LeaseTimeToLive(request)).ttl();
}

bool NfsAnswers(const DaemonProcess& d) {
  return supervisor::ProbeNfsNull("127.0.0.1", d.nfs_port(), base::Duration(500)).ok();
}

// The wall-clock time of the first line of `log` containing `text` (the
// daemon's timestamps, e.g. "2026-11-30T20:35:07.308+00:00 info ..."), or
// nullopt.
std::optional<absl::Time> LoggedAt(const std::string& log, const std::string& text) {
  const auto at = log.find(text);
  if (at == std::string::npos) return std::nullopt;
  const auto line_start = log.rfind('\n', at);
  const std::string line = log.substr(line_start == std::string::npos ? 0 : line_start + 1);
  absl::Time t;
  std::string error;
  if (!absl::ParseTime("%Y-%m-%dT%H:%M:%E3S%Ez", line.substr(0, line.find(' ')), &t, &error)) {
    return std::nullopt;
  }
  return t;
}

// SIGSTOPs etcd members; SIGCONTs them when it goes, pass or fail (the
// cluster then kills them in its turn).
class Frozen {
 public:
  Frozen(const EtcdCluster& cluster, std::vector<int> members)
      : cluster_(cluster), members_(std::move(members)) {
    for (int m : members_) KillPid(cluster_.pid(m), SIGSTOP);
  }
  ~Frozen() {
    for (int m : members_) {
      if (cluster_.pid(m) != 0) KillPid(cluster_.pid(m), SIGCONT);
    }
  }
  Frozen(const Frozen&) = delete;
  Frozen& operator=(const Frozen&) = delete;

  // Still stopped (state T in /proc/PID/stat).
  bool Stopped(int member) const {
    std::ifstream stat("/proc/" + std::to_string(cluster_.pid(member)) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
  }

 private:
  const EtcdCluster& cluster_;
  const std::vector<int> members_;
};

}  // namespace

TEST_CASE(
    "serving lease 1. the lease is taken (its key in etcd under the epoch) and real NFS I/O is "
    "served under it") {
  Fixture f;
  auto d = f.Start(3, "6s");

  const auto holder = RequireOk(EtcdGet(*f.client, kLeaseKey));
  CHECK(holder.value().substr(0, 21) == "00000000000000000003 ");
  CHECK(holder.lease() != 0);
  CHECK(RemainingTtl(*f.client, holder.lease()) > 0);
  const auto epoch = RequireOk(EtcdGet(*f.client, kEpochKey));
  CHECK(epoch.value() == "00000000000000000003");
  CHECK(epoch.lease() == 0);  // outlives every holder

  const auto status = RequireOk(d->Status());
  CHECK(status.state() == v1::SERVING);
  CHECK(status.lease().key() == kLeaseKey);
  CHECK(status.lease().held());
  CHECK(status.lease().valid_for_ms() > 0);
  CHECK(status.lease().valid_for_ms() <= 6000);
  REQUIRE(d->WriteEventually("/under-lease.txt", "written under epoch 3").ok());
  CHECK(RequireOk(d->ReadEventually("/under-lease.txt")) == "written under epoch 3");
  // Renewed on etcd's side too: two renewal periods on, the lease lives.
  CHECK(HoldsFor([&] { return RequireOk(d->Status()).lease().held(); }, milliseconds(4500)));
  CHECK(d->output().find("serving lease renewed") != std::string::npos);
  CHECK(RemainingTtl(*f.client, holder.lease()) > 0);
}

TEST_CASE(
    "serving lease 2. every etcd member frozen: the share-manager fences itself on its own clock "
    "(NFS stops answering, FAILED lease lost, exit 6)") {
  Fixture f;
  auto d = f.Start(2, "4s");
  REQUIRE(d->WriteEventually("/before-cut.txt", "served").ok());
  REQUIRE(NfsAnswers(*d));
  // Cut just after a confirmed renewal: the longest case, serving then ends
  // TTL - fence margin (3.2 s) later; etcd frees the lease no earlier than
  // the TTL (4 s) after that renewal.
  REQUIRE(WaitFor([&] { return d->output().find("serving lease renewed") != std::string::npos; },
                  milliseconds(15'000)));

  const auto cut = std::chrono::steady_clock::now();
  Frozen frozen(f.cluster, {0, 1, 2});
  REQUIRE_MESSAGE(WaitFor([&] { return !NfsAnswers(*d); }, milliseconds(30'000)), d->output());
  const auto fenced = std::chrono::steady_clock::now();
  MESSAGE("cut (all etcd members SIGSTOPped) -> NFS no longer answering: ",
          std::chrono::duration_cast<milliseconds>(fenced - cut).count(),
          " ms (TTL 4s, cut just after a confirmed renewal: serving ends 3.2s after it was sent)");

  const auto code = RequireOk(d->WaitExit(milliseconds(30'000)));
  CHECK(code == sharemgr::kExitLeaseLost);
  const std::string log = d->output();
  CHECK_MESSAGE(log.find("-> FAILED: lease lost: no renewal confirmed") != std::string::npos, log);
  CHECK(log.find("SIGKILL to ganesha pid") != std::string::npos);
  // On its own clock: etcd said nothing all along.
  for (int m = 0; m < 3; ++m) CHECK(frozen.Stopped(m));
  CHECK_FALSE(testing_support::WriteOnce("127.0.0.1", d->nfs_port(), d->pseudo_path(),
                                         "/after-cut.txt", "must not land", milliseconds(2000))
                  .ok());
}

TEST_CASE(
    "serving lease 3. a lower epoch, or the same one again, is refused and never serves: while "
    "the newer one holds the lease, and after it is gone") {
  Fixture f;
  auto newer = f.Start(5, "6s");

  const auto refused = [&](uint64_t epoch) {
    auto older = f.Start(epoch, "6s", false);
    const auto code = RequireOk(older->WaitExit(milliseconds(30'000)));
    CHECK(code == sharemgr::kExitLeaseLost);
    const std::string log = older->output();
    CHECK_MESSAGE(log.find("-> FAILED: lease lost: epoch " + std::to_string(epoch) +
                           " superseded by 5") != std::string::npos,
                  log);
    // Never served: no ganesha, the volume never touched.
    CHECK(log.find("started ganesha") == std::string::npos);
    CHECK(log.find("-> SERVING") == std::string::npos);
    CHECK(log.find("e2fsck") == std::string::npos);
    CHECK(log.find("mounted " + f.loop->path()) == std::string::npos);
    CHECK_FALSE(NfsAnswers(*older));
  };
  SUBCASE("while it holds the lease") {
    refused(4);
    refused(5);
    CHECK(RequireOk(newer->Status()).state() == v1::SERVING);
    CHECK(RequireOk(EtcdGet(*f.client, kLeaseKey)).value().substr(0, 20) == "00000000000000000005");
    REQUIRE(newer->WriteEventually("/still.txt", "epoch 5 still serves").ok());
  }
  SUBCASE("after it stopped") {
    newer->Signal(SIGTERM);
    REQUIRE(RequireOk(newer->WaitExit(milliseconds(30'000))) == sharemgr::kExitStopped);
    CHECK_FALSE(EtcdGet(*f.client, kLeaseKey).has_value());
    refused(4);
    refused(5);
    CHECK(RequireOk(EtcdGet(*f.client, kEpochKey)).value() == "00000000000000000005");
  }
}

TEST_CASE(
    "serving lease 4. a higher epoch waits while the older one holds the lease, and serves only "
    "after it stopped (its lease revoked: no TTL wait)") {
  Fixture f;
  // A long TTL: had the old lease to expire, the new one would wait 30 s.
  auto older = f.Start(1, "30s");
  REQUIRE(older->WriteEventually("/from-epoch-1.txt", "one").ok());
  const int64_t old_lease = RequireOk(EtcdGet(*f.client, kLeaseKey)).lease();
  const pid_t old_ganesha = RequireOk(older->Status()).ganesha_pid();
  REQUIRE(old_ganesha > 0);

  auto newer = f.Start(2, "30s", false);
  // Waiting: STARTING, no ganesha, the volume untouched, nothing answering.
  REQUIRE(newer
              ->WaitFor(
                  [](const v1::ShareStatus& s) {
                    return s.reason() == "waiting for the serving lease of epoch 2";
                  },
                  milliseconds(15'000), "waiting for the lease")
              .ok());
  CHECK(HoldsFor(
      [&] {
        const auto s = newer->Status();
        return s.ok() && s->state() == v1::STARTING && s->ganesha_pid() == 0 &&
               !s->lease().held() && !NfsAnswers(*newer);
      },
      milliseconds(3000)));
  CHECK(newer->output().find("serving lease held by epoch 1") != std::string::npos);
  CHECK(RequireOk(EtcdGet(*f.client, kLeaseKey)).lease() == old_lease);

  older->Signal(SIGTERM);
  REQUIRE(RequireOk(older->WaitExit(milliseconds(30'000))) == sharemgr::kExitStopped);
  // Revoked, not left to expire: etcd has forgotten it at once.
  CHECK(RemainingTtl(*f.client, old_lease) == -1);

  const auto serving = RequireOk(newer->WaitServing(milliseconds(30'000)));
  CHECK(serving.lease().held());
  const auto holder = RequireOk(EtcdGet(*f.client, kLeaseKey));
  CHECK(holder.value().substr(0, 20) == "00000000000000000002");
  CHECK(RequireOk(EtcdGet(*f.client, kEpochKey)).value() == "00000000000000000002");
  // It started ganesha only after the old share-manager had revoked its lease
  // (which it does once its ganesha is gone and the volume unmounted).
  const auto revoked = LoggedAt(older->output(), "serving lease of epoch 1 revoked");
  const auto started = LoggedAt(newer->output(), "started ganesha pid");
  REQUIRE_MESSAGE(revoked.has_value(), older->output());
  REQUIRE_MESSAGE(started.has_value(), newer->output());
  CHECK(*started >= *revoked);
  CHECK(kill(old_ganesha, 0) != 0);
  CHECK(RequireOk(newer->ReadEventually("/from-epoch-1.txt")) == "one");
}

TEST_CASE(
    "serving lease 5. SIGTERM: ganesha stopped, then the lease revoked (its key gone at once)") {
  Fixture f;
  auto d = f.Start(7, "30s");
  const int64_t lease = RequireOk(EtcdGet(*f.client, kLeaseKey)).lease();
  const pid_t ganesha = RequireOk(d->Status()).ganesha_pid();
  REQUIRE(ganesha > 0);
  d->Signal(SIGTERM);
  REQUIRE(RequireOk(d->WaitExit(milliseconds(30'000))) == sharemgr::kExitStopped);
  CHECK_FALSE(EtcdGet(*f.client, kLeaseKey).has_value());
  CHECK(RemainingTtl(*f.client, lease) == -1);
  CHECK(RequireOk(EtcdGet(*f.client, kEpochKey)).value() == "00000000000000000007");
  // ganesha's end is logged before the revoke (one thread logs both).
  const std::string log = d->output();
  const auto ended = log.find("[share-manager] ganesha pid " + std::to_string(ganesha) + " ");
  const auto revoked = log.find("serving lease of epoch 7 revoked");
  REQUIRE_MESSAGE(ended != std::string::npos, log);
  REQUIRE_MESSAGE(revoked != std::string::npos, log);
  CHECK(ended < revoked);
}

TEST_CASE(
    "serving lease 6. the etcd member in use frozen: renewals move on to the next member, the "
    "share keeps serving") {
  Fixture f;
  auto d = f.Start(4, "6s");
  // The client starts on the first member.
  Frozen frozen(f.cluster, {0});
  CHECK(HoldsFor(
      [&] {
        const auto s = d->Status();
        return s.ok() && s->state() == v1::SERVING && s->lease().held();
      },
      milliseconds(15'000)));
  CHECK(d->output().find("etcd LeaseKeepAlive stream on " + f.cluster.endpoint(0)) !=
        std::string::npos);
  REQUIRE(d->WriteEventually("/after-failover.txt", "still served").ok());
}
