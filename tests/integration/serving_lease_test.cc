// The serving lease end to end (issue #12): real share-managers on a real
// loop device, a real 3-member etcd cluster, a real NFS client. The keeper's
// timing on a fake clock is tests/sharemgr/serving_lease_test.cc.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/proc.h"
#include "etcd/client.h"
#include "etcd/serving_lease_record.h"
#include "sharemgr/etcd_lease_backend.h"
#include "sharemgr/exit_codes.h"
#include "supervisor/nfs_null_probe.h"
#include "tests/support/count_occurrences.h"
#include "tests/support/daemon_log.h"
#include "tests/support/daemon_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/etcd_keys.h"
#include "tests/support/make_loop.h"
#include "tests/support/nfs_client.h"
#include "tests/support/require_ok.h"
#include "tests/support/skip.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::CountOccurrences;
using testing_support::DaemonProcess;
using testing_support::EtcdCluster;
using testing_support::EtcdGet;
using testing_support::HoldsFor;
using testing_support::KillPid;
using testing_support::LoggedAt;
using testing_support::LoggedValidUntil;
using testing_support::LoopDevice;
using testing_support::MakeLoop;
using testing_support::ProcessesMentioning;
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
                                       bool wait_until_serving = true,
                                       const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> flags = {"--device", loop->path(), "--fs", "ext4"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return StartWith(epoch, ttl, wait_until_serving, flags);
  }
  // The same volume as a directory share of `dir` (no device).
  std::unique_ptr<DaemonProcess> StartOnDir(uint64_t epoch, const std::string& ttl,
                                            const std::string& dir,
                                            bool wait_until_serving = true) const {
    return StartWith(epoch, ttl, wait_until_serving, {"--export-dir", dir});
  }

 private:
  std::unique_ptr<DaemonProcess> StartWith(uint64_t epoch, const std::string& ttl,
                                           bool wait_until_serving,
                                           std::vector<std::string> flags) const {
    flags.insert(flags.end(), {"--epoch", std::to_string(epoch), "--lease-etcd",
                               absl::StrJoin(cluster.endpoints(), ","), "--lease-ttl", ttl});
    return RequireOk(
        DaemonProcess::Start({.extra_flags = flags, .wait_until_serving = wait_until_serving}));
  }
};

constexpr const char* kRenewed = testing_support::kLeaseRenewedLine;

// Waits for `text` to appear in the daemon's log.
bool WaitForLine(const DaemonProcess& d, const std::string& text) {
  return WaitFor([&] { return d.output().find(text) != std::string::npos; }, milliseconds(15'000));
}

// Waits for a renewal confirmed from now on (not one logged before).
bool WaitForNewRenewal(const DaemonProcess& d) {
  const size_t before = CountOccurrences(d.output(), kRenewed);
  return WaitFor([&] { return CountOccurrences(d.output(), kRenewed) > before; },
                 milliseconds(15'000));
}

// The epoch record of a holder on `lease` (its format pinned by the unit
// test "serving lease records: one format for both sides").
using etcd::EpochRecord;

// The serving lease of DaemonProcess's volume, for a backend driven by hand.
sharemgr::LeaseConfig LeaseConfigOf(const EtcdCluster& cluster, uint64_t epoch,
                                    const std::string& holder, int ttl_ms) {
  return {.endpoints = cluster.endpoints(),
          .prefix = "/sharemgr",
          .volume = "pvc-test",
          .holder = holder,
          .options = {.epoch = epoch, .ttl = base::Duration(ttl_ms)}};
}

// etcd's remaining TTL of a lease: -1 once it is gone (revoked or expired).
int64_t RemainingTtl(etcd::EtcdClient& client, int64_t lease) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  return RequireOk(client.LeaseTimeToLive(request)).ttl();
}

bool NfsAnswers(const DaemonProcess& d) {
  return supervisor::ProbeNfsNull("127.0.0.1", d.nfs_port(), base::Duration(500)).ok();
}

// Writes a new file through NFS again and again (a fresh connection each
// time) on its own thread, recording which writes were acknowledged and when.
class NfsWriter {
 public:
  explicit NfsWriter(const DaemonProcess& d) : d_(d) {
    thread_ = std::thread([this] {
      for (int i = 0; !stop_; ++i) {
        const std::string name = "/poll-" + std::to_string(i) + ".txt";
        const auto written = testing_support::WriteOnce(
            "127.0.0.1", d_.nfs_port(), d_.pseudo_path(), name, name, milliseconds(1000));
        const absl::Time now = absl::Now();
        {
          std::lock_guard lock(mu_);
          ++attempts_;
          if (written.ok()) {
            acknowledged_.push_back(name);
            last_acknowledged_ = now;
          }
        }
        std::this_thread::sleep_for(milliseconds(20));
      }
    });
  }
  ~NfsWriter() { Stop(); }
  NfsWriter(const NfsWriter&) = delete;
  NfsWriter& operator=(const NfsWriter&) = delete;

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int attempts() {
    std::lock_guard lock(mu_);
    return attempts_;
  }
  // The files acknowledged (each holds its own name), in order.
  std::vector<std::string> acknowledged() {
    std::lock_guard lock(mu_);
    return acknowledged_;
  }
  // When the last acknowledged write returned.
  std::optional<absl::Time> last_acknowledged() {
    std::lock_guard lock(mu_);
    return last_acknowledged_;
  }
  // Waits for `n` more attempts (acknowledged or not).
  bool MoreAttempts(int n) {
    const int from = attempts();
    return WaitFor([&] { return attempts() >= from + n; }, milliseconds(30'000));
  }

 private:
  const DaemonProcess& d_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  int attempts_ = 0;
  std::vector<std::string> acknowledged_;
  std::optional<absl::Time> last_acknowledged_;
  std::thread thread_;
};

// The fence comes at valid_until on the share-manager's clock, and is seen
// here a little later (the kill, the next NFS attempt). This much later is
// still fine; it is less than the fence margin (800 ms at TTL 4 s), so still
// before etcd could expire the lease (TTL after the renewal was sent).
constexpr absl::Duration kNoticeSlack = absl::Milliseconds(500);

// The process's state letter from /proc/PID/stat ('Z' zombie, 'T' stopped),
// or nullopt once it is gone.
std::optional<char> ProcessState(pid_t pid) {
  const auto stat = base::ReadProcStat(pid);
  if (!stat) return std::nullopt;
  return stat->state;
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
  bool Stopped(int member) const { return ProcessState(cluster_.pid(member)) == 'T'; }

 private:
  const EtcdCluster& cluster_;
  const std::vector<int> members_;
};

// Loses etcd's answer to the first `count` Txn calls (after etcd applied
// them): what a client sees when the answer is late or the connection drops
// on the way back.
class LoseTxnAnswers final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit LoseTxnAnswers(std::shared_ptr<std::atomic<int>> left) : left_(std::move(left)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new Lose(info, left_);
  }

 private:
  class Lose final : public grpc::experimental::Interceptor {
   public:
    Lose(grpc::experimental::ClientRpcInfo* info, std::shared_ptr<std::atomic<int>> left)
        : txn_(std::string(info->method()) == "/etcdserverpb.KV/Txn"), left_(std::move(left)) {}
    void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
      using grpc::experimental::InterceptionHookPoints;
      if (txn_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS) &&
          left_->fetch_sub(1) > 0) {
        *methods->GetRecvStatus() =
            grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the answer was lost (test)");
      }
      methods->Proceed();
    }

   private:
    const bool txn_;
    const std::shared_ptr<std::atomic<int>> left_;
  };
  const std::shared_ptr<std::atomic<int>> left_;
};

}  // namespace

TEST_CASE(
    "serving lease 0. an attempt whose answer was lost after etcd applied it: the next attempt "
    "adopts the key it put, it is not refused as superseded by its own epoch") {
  EtcdCluster cluster;
  auto client = RequireOk(etcd::EtcdClient::Create({.endpoints = cluster.endpoints()}));
  sharemgr::LeaseConfig config{.endpoints = cluster.endpoints(),
                               .prefix = "/sharemgr",
                               .volume = "pvc-test",
                               .holder = "pod-a",
                               .options = {.epoch = 4, .ttl = base::Duration(6000)}};
  auto left = std::make_shared<std::atomic<int>>(1);
  auto options = sharemgr::LeaseClientOptions(config);
  options.interceptors = [left] {
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
    out.push_back(std::make_unique<LoseTxnAnswers>(left));
    return out;
  };
  auto backend = RequireOk(sharemgr::MakeEtcdLeaseBackend(config, base::SteadyClock(), options));
  const auto deadline = [] { return base::SteadyClock().Now() + base::Duration(3000); };

  // The first attempt landed (the key is on its lease, the epoch recorded),
  // and its answer was lost.
  const auto first = backend->TryAcquire(6, deadline());
  REQUIRE_FALSE(first.ok());
  CHECK(first.status().code() == absl::StatusCode::kDeadlineExceeded);
  const auto landed = RequireOk(EtcdGet(*client, kLeaseKey));
  CHECK(landed.value() == "00000000000000000004 pod-a");
  CHECK(RequireOk(EtcdGet(*client, kEpochKey)).value() == EpochRecord(4, landed.lease()));
  CHECK(RemainingTtl(*client, landed.lease()) > 0);

  // Retried: taken, on the lease the first attempt put the key on.
  const auto second = RequireOk(backend->TryAcquire(6, deadline()));
  CHECK(second.outcome == sharemgr::LeaseBackend::Attempt::Outcome::kTaken);
  CHECK(second.granted_ttl_seconds > 0);
  const auto held = RequireOk(EtcdGet(*client, kLeaseKey));
  CHECK(held.lease() == landed.lease());
  CHECK(held.mod_revision() == landed.mod_revision());
  // And kept alive as ours.
  const auto renewal = RequireOk(backend->KeepAlive(deadline()));
  CHECK(renewal.ttl_seconds > 0);
  CHECK(renewal.key == sharemgr::LeaseBackend::Renewal::Key::kOurs);
  REQUIRE(backend->Revoke(deadline()).ok());
  CHECK_FALSE(EtcdGet(*client, kLeaseKey).has_value());
}

TEST_CASE(
    "serving lease 0b. the older holder's key deleted by hand while its etcd lease lives: the next "
    "epoch waits for the lease, not the key (that holder still serves until a renewal tells it)") {
  EtcdCluster cluster;
  auto client = RequireOk(etcd::EtcdClient::Create({.endpoints = cluster.endpoints()}));
  // The older holder, epoch 3, alive on its own lease.
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(30);
  const int64_t older = RequireOk(client->LeaseGrant(grant)).id();
  etcdserverpb::PutRequest put;
  put.set_key(kLeaseKey);
  put.set_value("00000000000000000003 pod-old");
  put.set_lease(older);
  RequireOk(client->Put(put));
  put.set_key(kEpochKey);
  put.set_value(EpochRecord(3, older));
  put.clear_lease();
  RequireOk(client->Put(put));

  const auto config = LeaseConfigOf(cluster, 4, "pod-new", 6000);
  auto backend = RequireOk(sharemgr::MakeEtcdLeaseBackend(config, base::SteadyClock()));
  const auto in = [](int ms) { return base::SteadyClock().Now() + base::Duration(ms); };
  const auto attempt = RequireOk(backend->TryAcquire(6, in(3000)));
  REQUIRE(attempt.outcome == sharemgr::LeaseBackend::Attempt::Outcome::kHeldByOther);
  CHECK(attempt.other_epoch == 3);

  etcdserverpb::DeleteRangeRequest del;
  del.set_key(kLeaseKey);
  RequireOk(client->DeleteRange(del));
  // Key gone, lease alive: not released, however often asked.
  CHECK_FALSE(RequireOk(backend->WaitReleased(in(1000))));
  CHECK_FALSE(RequireOk(backend->WaitReleased(in(500))));
  // The lease gone (revoked: the holder stopped): released.
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(older);
  RequireOk(client->LeaseRevoke(revoke));
  CHECK(RequireOk(backend->WaitReleased(in(3000))));
  CHECK(RequireOk(backend->TryAcquire(6, in(3000))).outcome ==
        sharemgr::LeaseBackend::Attempt::Outcome::kTaken);
  CHECK(backend->Revoke(in(3000)).ok());
}

TEST_CASE(
    "serving lease 0c. the older holder's key deleted by hand before the next epoch ever looked: "
    "it finds no key, and still waits for the lease the epoch record names") {
  EtcdCluster cluster;
  auto client = RequireOk(etcd::EtcdClient::Create({.endpoints = cluster.endpoints()}));
  const auto config = [&](uint64_t epoch, const std::string& holder) {
    return LeaseConfigOf(cluster, epoch, holder, 30'000);
  };
  const auto in = [](int ms) { return base::SteadyClock().Now() + base::Duration(ms); };
  using Outcome = sharemgr::LeaseBackend::Attempt::Outcome;
  // Epoch 3 holds the lease (and would serve on until a renewal reads its key).
  auto older = RequireOk(sharemgr::MakeEtcdLeaseBackend(config(3, "pod-old"), base::SteadyClock()));
  REQUIRE(RequireOk(older->TryAcquire(30, in(3000))).outcome == Outcome::kTaken);
  const int64_t older_lease = RequireOk(EtcdGet(*client, kLeaseKey)).lease();
  CHECK(RequireOk(EtcdGet(*client, kEpochKey)).value() == EpochRecord(3, older_lease));
  // etcdctl del, before epoch 4 exists.
  etcdserverpb::DeleteRangeRequest del;
  del.set_key(kLeaseKey);
  RequireOk(client->DeleteRange(del));

  auto newer = RequireOk(sharemgr::MakeEtcdLeaseBackend(config(4, "pod-new"), base::SteadyClock()));
  const auto attempt = RequireOk(newer->TryAcquire(30, in(3000)));
  REQUIRE(attempt.outcome == Outcome::kHeldByOther);
  CHECK(attempt.other_epoch == 3);
  CHECK_FALSE(EtcdGet(*client, kLeaseKey).has_value());  // nothing taken meanwhile
  CHECK(RequireOk(EtcdGet(*client, kEpochKey)).value() == EpochRecord(3, older_lease));
  // Not released while epoch 3's lease lives, however often asked.
  CHECK_FALSE(RequireOk(newer->WaitReleased(in(1000))));
  CHECK(RequireOk(newer->TryAcquire(30, in(3000))).outcome == Outcome::kHeldByOther);
  // Epoch 3 stops (its lease revoked): released, and taken.
  REQUIRE(older->Revoke(in(3000)).ok());
  CHECK(RequireOk(newer->WaitReleased(in(3000))));
  CHECK(RequireOk(newer->TryAcquire(30, in(3000))).outcome == Outcome::kTaken);
  const int64_t newer_lease = RequireOk(EtcdGet(*client, kLeaseKey)).lease();
  CHECK(RequireOk(EtcdGet(*client, kEpochKey)).value() == EpochRecord(4, newer_lease));
  CHECK(newer->Revoke(in(3000)).ok());
}

TEST_CASE(
    "serving lease 0d. an epoch record naming no etcd lease (written before records did) and no "
    "key: its holder is waited out for a whole TTL") {
  EtcdCluster cluster;
  auto client = RequireOk(etcd::EtcdClient::Create({.endpoints = cluster.endpoints()}));
  etcdserverpb::PutRequest put;
  put.set_key(kEpochKey);
  put.set_value("00000000000000000003");
  RequireOk(client->Put(put));
  const auto config = LeaseConfigOf(cluster, 4, "pod-new", 3000);
  auto backend = RequireOk(sharemgr::MakeEtcdLeaseBackend(config, base::SteadyClock()));
  const auto in = [](int ms) { return base::SteadyClock().Now() + base::Duration(ms); };
  using Outcome = sharemgr::LeaseBackend::Attempt::Outcome;
  const auto first_seen = base::SteadyClock().Now();
  REQUIRE(RequireOk(backend->TryAcquire(3, in(3000))).outcome == Outcome::kHeldByOther);
  CHECK_FALSE(EtcdGet(*client, kLeaseKey).has_value());
  // Waited until the TTL since it was first seen has passed, not before.
  while (!RequireOk(backend->WaitReleased(in(1000)))) {
  }
  CHECK(base::SteadyClock().Now() - first_seen >= base::Duration(3000));
  CHECK(RequireOk(backend->TryAcquire(3, in(3000))).outcome == Outcome::kTaken);
  CHECK(RequireOk(EtcdGet(*client, kEpochKey)).value().substr(0, 21) == "00000000000000000004 ");
  CHECK(backend->Revoke(in(3000)).ok());
}

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
  CHECK(epoch.value() == EpochRecord(3, holder.lease()));
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
    "(NFS stops answering, FAILED lease lost, exit 6), at valid_until: before etcd could let "
    "anyone else in") {
  Fixture f;
  auto d = f.Start(2, "4s");
  REQUIRE(d->WriteEventually("/before-cut.txt", "served").ok());
  REQUIRE(NfsAnswers(*d));
  // Cut just after a confirmed renewal: the longest case, serving then ends
  // TTL - fence margin (3.2 s) after it was sent; etcd frees the lease no
  // earlier than the TTL (4 s) after that.
  REQUIRE(WaitForNewRenewal(*d));

  const auto cut = absl::Now();
  Frozen frozen(f.cluster, {0, 1, 2});
  REQUIRE_MESSAGE(WaitFor([&] { return !NfsAnswers(*d); }, milliseconds(30'000)), d->output());
  const auto fenced = absl::Now();
  // At once, while it still runs (FAILED, lingering): no write lands.
  CHECK_FALSE(testing_support::WriteOnce("127.0.0.1", d->nfs_port(), d->pseudo_path(),
                                         "/after-cut.txt", "must not land", milliseconds(2000))
                  .ok());
  const auto valid_until = LoggedValidUntil(d->output());
  REQUIRE_MESSAGE(valid_until.has_value(), d->output());
  // Fenced by valid_until (the last confirmed renewal's send + TTL - fence
  // margin), give or take noticing it here: before the TTL since that send.
  CHECK(fenced <= *valid_until + kNoticeSlack);
  MESSAGE("cut (all etcd members SIGSTOPped) -> NFS no longer answering: ",
          absl::ToInt64Milliseconds(fenced - cut), " ms; ",
          absl::ToInt64Milliseconds(fenced - *valid_until),
          " ms after valid_until (TTL 4s, fence margin 0.8s)");

  const auto code = RequireOk(d->WaitExit(milliseconds(30'000)));
  CHECK(code == sharemgr::kExitLeaseLost);
  const std::string log = d->output();
  CHECK_MESSAGE(log.find("-> FAILED: lease lost: no renewal confirmed") != std::string::npos, log);
  CHECK(log.find("SIGKILL to ganesha pid") != std::string::npos);
  // On its own clock: etcd said nothing all along.
  for (int m = 0; m < 3; ++m) CHECK(frozen.Stopped(m));
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
    CHECK(RequireOk(EtcdGet(*f.client, kEpochKey)).value().substr(0, 21) ==
          "00000000000000000005 ");
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
  CHECK(RequireOk(EtcdGet(*f.client, kEpochKey)).value().substr(0, 21) == "00000000000000000002 ");
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
  CHECK(RequireOk(EtcdGet(*f.client, kEpochKey)).value().substr(0, 21) == "00000000000000000007 ");
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

namespace {

// Serving with a lease of TTL 4 s, `stall` makes the share-manager unable to
// act (SIGSTOP, a full stderr pipe) just after a confirmed renewal, while a
// client keeps writing. Its lease fencer must SIGKILL ganesha at valid_until:
// no write is acknowledged after it, though etcd has long let the lease
// expire. Then `unstall`: the share-manager notices, fences itself, exits 6,
// and leaves nothing running.
void CheckFencedWhileStalled(const std::function<void(DaemonProcess&)>& stall,
                             const std::function<void(DaemonProcess&)>& unstall) {
  Fixture f;
  auto d = f.Start(8, "4s");
  const pid_t ganesha = RequireOk(d->Status()).ganesha_pid();
  REQUIRE(ganesha > 0);
  REQUIRE(d->WriteEventually("/before-stall.txt", "served").ok());
  REQUIRE(WaitForNewRenewal(*d));
  NfsWriter writer(*d);
  REQUIRE(WaitFor([&] { return !writer.acknowledged().empty(); }, milliseconds(10'000)));

  stall(*d);
  const auto stalled = absl::Now();
  // Nobody renews it: etcd lets it expire. A ganesha still serving would go
  // on acknowledging writes past this point.
  REQUIRE(
      WaitFor([&] { return !EtcdGet(*f.client, kLeaseKey).has_value(); }, milliseconds(30'000)));
  REQUIRE(writer.MoreAttempts(10));
  writer.Stop();
  // Killed while share-manager could do nothing: only a zombie is left (its
  // parent cannot reap it yet), or nothing.
  const auto state = ProcessState(ganesha);
  CHECK_MESSAGE((!state || *state == 'Z'), "ganesha pid ", ganesha, " state ", state.value_or('?'));

  unstall(*d);
  const auto code = RequireOk(d->WaitExit(milliseconds(30'000)));
  CHECK(code == sharemgr::kExitLeaseLost);
  const std::string log = d->output();
  const auto valid_until = LoggedValidUntil(log);
  REQUIRE_MESSAGE(valid_until.has_value(), log);
  const auto last = writer.last_acknowledged();
  REQUIRE(last.has_value());
  MESSAGE("stalled ", absl::ToInt64Milliseconds(*valid_until - stalled),
          " ms before valid_until; the last write acknowledged ",
          absl::ToInt64Milliseconds(*last - *valid_until), " ms after valid_until");
  CHECK_MESSAGE(*last <= *valid_until + kNoticeSlack, log);
  CHECK_MESSAGE(log.find("lease fencer SIGKILLed ganesha pid " + std::to_string(ganesha)) !=
                    std::string::npos,
                log);
  CHECK(log.find("-> FAILED: lease lost") != std::string::npos);
  // Nothing it started is left: no ganesha, no fencer (both name its state dir).
  CHECK(WaitFor([&] { return ProcessesMentioning(d->state_dir()).empty(); }, milliseconds(5000)));
}

}  // namespace

TEST_CASE(
    "serving lease 7. the share-manager SIGSTOPped while serving: its lease fencer SIGKILLs "
    "ganesha at valid_until, no NFS write is acknowledged after it, and on SIGCONT it fences "
    "itself, exits 6 and leaves nothing behind") {
  CheckFencedWhileStalled([](DaemonProcess& d) { d.Signal(SIGSTOP); },
                          [](DaemonProcess& d) { d.Signal(SIGCONT); });
}

TEST_CASE(
    "serving lease 8. the share-manager's stderr full (nobody reads it): every thread that logs "
    "blocks, the loop too, and still the lease fencer SIGKILLs ganesha at valid_until") {
  CheckFencedWhileStalled([](DaemonProcess& d) { REQUIRE(d.FillOutputPipe().ok()); },
                          [](DaemonProcess& d) { d.ResumeOutput(); });
}

namespace {

// A change carrying `epoch`, called through `method` (the stub's
// synchronous call for it): its status.
template <typename Request, typename Response>
grpc::Status CallWithEpoch(const DaemonProcess& d, uint64_t epoch,
                           grpc::Status (v1::ShareManager::Stub::*method)(grpc::ClientContext*,
                                                                          const Request&,
                                                                          Response*)) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + milliseconds(10'000));
  Request request;
  request.set_epoch(epoch);
  Response response;
  return (*d.Stub().*method)(&context, request, &response);
}

// Whether anything is mounted at `target` (/proc/mounts).
bool MountedAt(const std::string& target) {
  std::ifstream mounts("/proc/mounts");
  std::string device, at;
  while (mounts >> device >> at) {
    if (at == target) return true;
    mounts.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return false;
}

}  // namespace

TEST_CASE(
    "serving lease 9. fenced: the volume is unmounted at once (not after the linger), and Mount, "
    "trim and resize are refused FAILED_PRECONDITION while the FAILED status is still served") {
  Fixture f;
  // A long linger: what happens to the volume must not wait for it.
  auto d = f.Start(9, "4s", true, {"--failed-linger", "60s"});
  REQUIRE(MountedAt(d->export_dir()));
  Frozen frozen(f.cluster, {0, 1, 2});
  const auto failed = d->WaitFor(
      [](const v1::ShareStatus& s) {
        return s.state() == v1::FAILED && s.reason().starts_with("lease lost");
      },
      milliseconds(30'000), "FAILED lease lost");
  REQUIRE_MESSAGE(failed.ok(), failed.status().ToString(), "\n", d->output());
  CHECK_MESSAGE(WaitFor([&] { return !MountedAt(d->export_dir()); }, milliseconds(10'000)),
                d->output());
  for (const auto& [what, call] :
       std::vector<std::pair<std::string, std::function<grpc::Status()>>>{
           {"Mount", [&] { return CallWithEpoch(*d, 9, &v1::ShareManager::Stub::Mount); }},
           {"trim", [&] { return CallWithEpoch(*d, 9, &v1::ShareManager::Stub::FilesystemTrim); }},
           {"resize",
            [&] { return CallWithEpoch(*d, 9, &v1::ShareManager::Stub::FilesystemResize); }},
       }) {
    CAPTURE(what);
    const grpc::Status refused = call();
    CHECK(refused.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_MESSAGE(refused.error_message().find("lease lost") != std::string::npos,
                  refused.error_message());
  }
  CHECK_FALSE(MountedAt(d->export_dir()));
  // Still lingering, FAILED readable.
  CHECK_FALSE(d->exited());
  CHECK(RequireOk(d->Status()).state() == v1::FAILED);
}

TEST_CASE(
    "serving lease 10. handover by expiry: the holder SIGSTOPped, the next epoch takes over once "
    "etcd expired its lease: the old one acknowledged no write after that, every write it "
    "acknowledged is there, and on SIGCONT it does not serve again") {
  Fixture f;
  const testing_support::TempDir shared("sharemgr-handover");
  auto older = f.StartOnDir(1, "4s", shared.path());
  REQUIRE(older->WriteEventually("/from-epoch-1.txt", "one").ok());
  auto newer = f.StartOnDir(2, "4s", shared.path(), false);
  REQUIRE_MESSAGE(WaitForLine(*newer, "serving lease held by epoch 1"), newer->output());
  NfsWriter writer(*older);
  REQUIRE(WaitFor([&] { return !writer.acknowledged().empty(); }, milliseconds(10'000)));
  REQUIRE(WaitForNewRenewal(*older));

  older->Signal(SIGSTOP);
  REQUIRE_MESSAGE(newer->WaitServing(milliseconds(30'000)).ok(), newer->output());
  REQUIRE(writer.MoreAttempts(10));
  writer.Stop();
  const auto taken = LoggedAt(newer->output(), "serving lease of epoch 2 taken");
  REQUIRE_MESSAGE(taken.has_value(), newer->output());
  const auto last = writer.last_acknowledged();
  REQUIRE(last.has_value());
  const auto valid_until = LoggedValidUntil(older->output());
  REQUIRE_MESSAGE(valid_until.has_value(), older->output());
  MESSAGE("the old holder's last acknowledged write came ",
          absl::ToInt64Milliseconds(*taken - *last), " ms before epoch 2 took the lease, ",
          absl::ToInt64Milliseconds(*valid_until - *last), " ms before its valid_until");
  CHECK(*last <= *valid_until + kNoticeSlack);
  CHECK(*last < *taken);

  // Everything the old one acknowledged is there, served by the new one.
  const auto written = writer.acknowledged();
  for (const auto& name : written) {
    std::ifstream file(shared.path() + name);
    std::string content;
    std::getline(file, content);
    CHECK_MESSAGE(content == name, name);
  }
  CHECK(RequireOk(newer->ReadEventually("/from-epoch-1.txt")) == "one");
  CHECK(RequireOk(newer->ReadEventually(written.back())) == written.back());

  older->Signal(SIGCONT);
  CHECK(RequireOk(older->WaitExit(milliseconds(30'000))) == sharemgr::kExitLeaseLost);
  CHECK(CountOccurrences(older->output(), "started ganesha pid") == 1);
  CHECK(
      WaitFor([&] { return ProcessesMentioning(older->state_dir()).empty(); }, milliseconds(5000)));
  CHECK(RequireOk(newer->Status()).state() == v1::SERVING);
}

TEST_CASE(
    "serving lease 11. taken, but over before the loop heard of it (the keeper blocked writing to "
    "a full stderr): nothing of the volume is touched, no ganesha, FAILED lease lost, exit 6") {
  Fixture f;
  auto older = f.Start(1, "30s");
  // TTL 2 s; the drift margin as long as it may be, so that there is time to
  // fill the pipe between the release and the take; info level, so that the
  // keeper logs nothing between those two lines.
  auto newer =
      f.Start(2, "2s", false,
              {"--lease-drift-margin", "2s", "--log-level", "info", "--failed-linger", "5s"});
  REQUIRE_MESSAGE(WaitForLine(*newer, "serving lease held by epoch 1"), newer->output());
  older->Signal(SIGTERM);
  REQUIRE(RequireOk(older->WaitExit(milliseconds(30'000))) == sharemgr::kExitStopped);
  REQUIRE(WaitForLine(*newer, "serving lease released by its holder"));
  REQUIRE(newer->FillOutputPipe().ok());
  // Taken in etcd (the keeper is now blocked on its "taken" line), then
  // expired there: nobody renews it.
  REQUIRE(WaitFor(
      [&] {
        const auto key = EtcdGet(*f.client, kLeaseKey);
        return key && key->value().starts_with("00000000000000000002 ");
      },
      milliseconds(15'000)));
  REQUIRE(
      WaitFor([&] { return !EtcdGet(*f.client, kLeaseKey).has_value(); }, milliseconds(30'000)));
  newer->ResumeOutput();

  CHECK(RequireOk(newer->WaitExit(milliseconds(30'000))) == sharemgr::kExitLeaseLost);
  const std::string log = newer->output();
  const auto taken = log.find("serving lease of epoch 2 taken");
  REQUIRE_MESSAGE(taken != std::string::npos, log);
  // Else this test was too slow to block the keeper before it took the lease.
  REQUIRE_MESSAGE(taken > log.rfind("#filler"), log);
  CHECK_MESSAGE(log.find("-> FAILED: lease lost") != std::string::npos, log);
  CHECK(log.find("running e2fsck") == std::string::npos);
  CHECK(log.find("mounted " + f.loop->path()) == std::string::npos);
  CHECK(log.find("started ganesha") == std::string::npos);
}

namespace {

// One thread of a share-manager under ptrace, so that it alone stops while
// the process's other threads (the lease keeper's) run on. Its loop thread is
// its main thread (Daemon::Run runs the loop there), whose tid is its pid.
// Detached (stopped first if need be) when it goes, pass or fail.
class TracedThread {
 public:
  // nullptr, having told why and marked the case skipped, when ptrace is not
  // permitted here (Yama, seccomp, no CAP_SYS_PTRACE).
  static std::unique_ptr<TracedThread> Seize(pid_t tid, long options) {
    if (ptrace(PTRACE_SEIZE, tid, nullptr, reinterpret_cast<void*>(options)) != 0) {
      std::string scope = "?";
      std::ifstream("/proc/sys/kernel/yama/ptrace_scope") >> scope;
      testing_support::SkipTestCase(
          absl::StrCat("ptrace is not permitted here (PTRACE_SEIZE: ", std::strerror(errno),
                       "; /proc/sys/kernel/yama/ptrace_scope: ", scope,
                       "): this case stops one thread of share-manager with it"));
      return nullptr;
    }
    return std::unique_ptr<TracedThread>(new TracedThread(tid));
  }
  ~TracedThread() {
    if (detached_) return;
    if (!stopped_ && ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) == 0) {
      WaitStop([](int) { return true; }, milliseconds(10'000));
    }
    ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
  }

  // Stops it while it waits for events (epoll), so that it holds no lock
  // another thread needs (the log's, malloc's, the keeper's): stopped
  // anywhere else, it is let go and stopped again. False when it did not stop
  // there.
  bool InterruptIdle() {
    for (int attempt = 0; attempt < kIdleAttempts; ++attempt) {
      if (ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0) return false;
      if (!WaitStop([](int status) { return status >> 16 == PTRACE_EVENT_STOP; },
                    milliseconds(10'000))) {
        return false;
      }
      if (InEpollWait()) return true;
      if (ptrace(PTRACE_CONT, tid_, nullptr, nullptr) != 0) return false;
      stopped_ = false;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }
  // Lets it run until it forks, where it stays stopped: the new child's pid
  // (let go itself: it runs on untraced).
  std::optional<pid_t> RunUntilFork(milliseconds timeout) {
    if (ptrace(PTRACE_CONT, tid_, nullptr, nullptr) != 0) return std::nullopt;
    stopped_ = false;
    if (!WaitStop([](int status) { return status >> 8 == (SIGTRAP | (PTRACE_EVENT_FORK << 8)); },
                  timeout)) {
      return std::nullopt;
    }
    unsigned long child = 0;
    if (ptrace(PTRACE_GETEVENTMSG, tid_, nullptr, &child) != 0) return std::nullopt;
    const pid_t pid = static_cast<pid_t>(child);
    // Traced from birth (PTRACE_O_TRACEFORK): it reports its first stop.
    int status = 0;
    if (!WaitFor([&] { return waitpid(pid, &status, __WALL | WNOHANG) == pid; }, timeout)) {
      return std::nullopt;
    }
    ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
    return pid;
  }
  void Detach() {
    ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
    stopped_ = false;
    detached_ = true;
  }

 private:
  explicit TracedThread(pid_t tid) : tid_(tid) {}

  // InterruptIdle's tries: the loop is idle most of the time.
  static constexpr int kIdleAttempts = 100;

  // Whether the stopped thread's system call (/proc/<pid>/task/<tid>/syscall,
  // its number first) is the loop's idle wait.
  bool InEpollWait() const {
    long number = -1;
    std::ifstream(absl::StrCat("/proc/", tid_, "/task/", tid_, "/syscall")) >> number;
    return number == SYS_epoll_wait || number == SYS_epoll_pwait || number == SYS_epoll_pwait2;
  }

  // Waits for a stop that `wanted`; any other (a signal's delivery) is
  // passed on and the thread resumed. Only stops are waited for (no
  // WEXITED): share-manager's exit is DaemonProcess's to reap.
  bool WaitStop(const std::function<bool(int)>& wanted, milliseconds timeout) {
    if (detached_) return false;
    return WaitFor(
        [&] {
          siginfo_t info{};
          if (waitid(P_PID, static_cast<id_t>(tid_), &info, WSTOPPED | WNOHANG | __WALL) != 0 ||
              info.si_pid != tid_ || info.si_code != CLD_TRAPPED) {
            return false;
          }
          // As waitpid encodes a ptrace stop: the event above the signal.
          const int status = (info.si_status << 8) | 0x7f;
          if (wanted(status)) {
            stopped_ = true;
            return true;
          }
          const int signal = status >> 16 == 0 ? WSTOPSIG(status) : 0;
          ptrace(PTRACE_CONT, tid_, nullptr, reinterpret_cast<void*>(static_cast<long>(signal)));
          return false;
        },
        timeout);
  }

  const pid_t tid_;
  bool stopped_ = false;
  bool detached_ = false;
};

// The program a process runs (/proc/<pid>/exe), empty once it is gone.
std::string ExeOf(pid_t pid) {
  std::error_code error;
  return std::filesystem::read_symlink(absl::StrCat("/proc/", pid, "/exe"), error).string();
}

// Whether `pid` runs: neither gone nor a zombie (a killed child of a
// share-manager whose loop is stopped stays one: nobody reaps it).
bool Running(pid_t pid) {
  const auto state = ProcessState(pid);
  return state.has_value() && *state != 'Z';
}

// A share-manager serving under `epoch`, renewing its lease, whose loop
// thread is then stopped while idle; no loop_thread when ptrace is not
// permitted (the case is then skipped).
struct StalledLoop {
  std::unique_ptr<DaemonProcess> d;
  pid_t ganesha = 0;
  std::unique_ptr<TracedThread> loop_thread;  // detached before d goes
};
StalledLoop ServeWithLoopStopped(const Fixture& f, uint64_t epoch, const std::string& ttl) {
  StalledLoop s{.d = f.Start(epoch, ttl)};
  s.ganesha = RequireOk(s.d->Status()).ganesha_pid();
  REQUIRE(s.ganesha > 0);
  REQUIRE(WaitForNewRenewal(*s.d));
  s.loop_thread = TracedThread::Seize(s.d->pid(), 0);
  if (s.loop_thread) REQUIRE(s.loop_thread->InterruptIdle());
  return s;
}

}  // namespace

TEST_CASE(
    "serving lease 12. share-manager stalled right after it forked ganesha, until etcd let the "
    "lease expire: the child waits at its start gate (still share-manager's image, no NFS), and "
    "on resume it never runs ganesha: FAILED lease lost, exit 6") {
  Fixture f;
  const testing_support::TempDir dir("sharemgr-gate");
  // An older holder (epoch 3, by hand) keeps share-manager waiting, its
  // fencer started, until the test is ready to catch the fork.
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(30);
  const int64_t older = RequireOk(f.client->LeaseGrant(grant)).id();
  etcdserverpb::PutRequest put;
  put.set_key(kLeaseKey);
  put.set_value("00000000000000000003 pod-old");
  put.set_lease(older);
  RequireOk(f.client->Put(put));
  put.set_key(kEpochKey);
  put.set_value(EpochRecord(3, older));
  put.clear_lease();
  RequireOk(f.client->Put(put));
  auto d = f.StartOnDir(4, "3s", dir.path(), false);
  REQUIRE_MESSAGE(WaitForLine(*d, "serving lease held by epoch 3"), d->output());
  auto loop_thread = TracedThread::Seize(d->pid(), PTRACE_O_TRACEFORK);
  if (!loop_thread) return;
  REQUIRE(loop_thread->InterruptIdle());

  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(older);
  RequireOk(f.client->LeaseRevoke(revoke));
  // The next fork of the loop thread is ganesha's (taken, a directory share:
  // nothing else to start). It stays stopped right there, and then so does
  // the rest of share-manager.
  const auto child = loop_thread->RunUntilFork(milliseconds(30'000));
  REQUIRE_MESSAGE(child.has_value(), d->output());
  d->Signal(SIGSTOP);
  const std::string share_manager = ExeOf(d->pid());
  REQUIRE_FALSE(share_manager.empty());
  // Nobody renews the lease: etcd lets it expire, and valid_until (before
  // that) has passed. All the while the child runs nothing of ganesha.
  const auto still_held = [&] { return ExeOf(*child) == share_manager && !NfsAnswers(*d); };
  CHECK(still_held());
  REQUIRE(WaitFor([&] { return !still_held() || !EtcdGet(*f.client, kLeaseKey).has_value(); },
                  milliseconds(30'000)));
  CHECK_MESSAGE(still_held(), "pid ", *child, " runs ", ExeOf(*child));

  d->Signal(SIGCONT);
  loop_thread->Detach();
  CHECK(RequireOk(d->WaitExit(milliseconds(30'000))) == sharemgr::kExitLeaseLost);
  const std::string log = d->output();
  CHECK_MESSAGE(log.find(absl::StrCat("ganesha pid ", *child, " could start")) != std::string::npos,
                log);
  CHECK(log.find("started ganesha pid") == std::string::npos);
  CHECK(log.find("-> FAILED: lease lost") != std::string::npos);
  CHECK(WaitFor([&] { return ProcessesMentioning(d->state_dir()).empty(); }, milliseconds(5000)));
}

TEST_CASE(
    "serving lease 13. the loop thread stopped (ptrace) while the keeper renews: the keeper "
    "itself extends the fencer, ganesha serves on past several TTLs, and the share is still "
    "SERVING when the loop runs again") {
  Fixture f;
  StalledLoop stalled = ServeWithLoopStopped(f, 5, "3s");
  if (!stalled.loop_thread) return;
  // Renewed on while the loop cannot run (the keeper logs them itself).
  REQUIRE(WaitForNewRenewal(*stalled.d));
  // Three TTLs: the validity the loop last saw has long passed.
  CHECK_MESSAGE(HoldsFor([&] { return Running(stalled.ganesha); }, milliseconds(9'000)),
                stalled.d->output());
  CHECK(NfsAnswers(*stalled.d));
  stalled.loop_thread->Detach();
  stalled.loop_thread.reset();
  CHECK(HoldsFor(
      [&] {
        const auto s = stalled.d->Status();
        return s.ok() && s->state() == v1::SERVING && s->ganesha_pid() == stalled.ganesha;
      },
      milliseconds(2'000)));
  CHECK(stalled.d->output().find("lease fencer SIGKILLed") == std::string::npos);
}

TEST_CASE(
    "serving lease 14. the loop thread stopped (ptrace) when the lease is revoked in etcd: the "
    "keeper's next renewal learns it and tells the fencer the validity is over, which SIGKILLs "
    "ganesha at once, not at the valid_until it last heard (NFS stops answering, the loop still "
    "stopped), and once the loop runs: FAILED lease lost, exit 6") {
  Fixture f;
  StalledLoop stalled = ServeWithLoopStopped(f, 6, "9s");
  if (!stalled.loop_thread) return;
  const int64_t lease = RequireOk(EtcdGet(*f.client, kLeaseKey)).lease();
  // Revoked just after a renewal: the validity the fencer holds ends TTL
  // minus the fence margin (7.2 s) after it; the keeper's next renewal
  // (which learns the lease is gone) comes TTL/3 (3 s) after it, answered
  // within TTL/6 (1.5 s).
  REQUIRE(WaitForNewRenewal(*stalled.d));
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease);
  RequireOk(f.client->LeaseRevoke(revoke));
  // A bound against hangs only: the check is the next one.
  REQUIRE_MESSAGE(WaitFor([&] { return !Running(stalled.ganesha); }, milliseconds(15'000)),
                  stalled.d->output());
  const absl::Time killed = absl::Now();
  const auto valid_until = LoggedValidUntil(stalled.d->output());
  REQUIRE_MESSAGE(valid_until.has_value(), stalled.d->output());
  // Killed when the keeper learned (within 4.5 s of the renewal), not when
  // the validity the fencer had heard of ended (7.2 s): a second's slack.
  CHECK_MESSAGE(killed < *valid_until - absl::Seconds(1), "ganesha killed only ",
                absl::ToInt64Milliseconds(*valid_until - killed),
                " ms before the validity the fencer last heard of ended\n", stalled.d->output());
  CHECK_FALSE(NfsAnswers(*stalled.d));

  stalled.loop_thread->Detach();
  stalled.loop_thread.reset();
  CHECK(RequireOk(stalled.d->WaitExit(milliseconds(30'000))) == sharemgr::kExitLeaseLost);
  const std::string log = stalled.d->output();
  CHECK_MESSAGE(log.find("-> FAILED: lease lost") != std::string::npos, log);
  CHECK_MESSAGE(log.find(absl::StrCat("lease fencer SIGKILLed ganesha pid ", stalled.ganesha)) !=
                    std::string::npos,
                log);
  CHECK(WaitFor([&] { return ProcessesMentioning(stalled.d->state_dir()).empty(); },
                milliseconds(5000)));
}
