// Highly available share-controller (issue #12) with real processes: three
// share-controller replicas on one real 3-member etcd and one work dir, real
// share-manager pods (with their serving leases in the same etcd) and real
// NFS. The election's logic on a fake clock is
// tests/controller/ha/leader_election_test.cc; on a real etcd in one process,
// tests/controller/ha/etcd_election_test.cc.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/proc.h"
#include "controller/core/conditions.h"
#include "controller/ha/ha_replica.h"
#include "controller/runtime/local/local_pod_runtime.h"
#include "controller/store/etcd_store.h"
#include "etcd/lease_keep_alive.h"
#include "etcd/serving_lease_record.h"
#include "tests/support/daemon_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/etcd_keys.h"
#include "tests/support/leftovers.h"
#include "tests/support/nfs_client.h"
#include "tests/support/program_process.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

namespace pb = sharemanager::controller::v1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing_support::EtcdGet;
using testing_support::EtcdRevision;
using testing_support::HoldsFor;
using testing_support::RequireOk;
using testing_support::WaitFor;

constexpr char kVolume[] = "vol-ha";
constexpr char kPrefix[] = "/ha";
constexpr char kLeaderKey[] = "/ha/leader";
constexpr char kLeaseKey[] = "/ha/leases/vol-ha";
constexpr char kEpochKey[] = "/ha/epochs/vol-ha";
constexpr milliseconds kLeaderTtl{3000};
constexpr milliseconds kPodLeaseTtl{4000};
constexpr milliseconds kDriftMargin{1000};

std::string ShareControllerBinary() {
  return std::filesystem::path(testing_support::ShareManagerBinary()).parent_path().parent_path() /
         "controller" / "share-controller";
}

long Ms(Clock::duration d) {
  return static_cast<long>(std::chrono::duration_cast<milliseconds>(d).count());
}

// A process's state letter in /proc/PID/stat ('T' stopped), or 0.
char ProcState(pid_t pid) {
  const auto stat = base::ReadProcStat(pid);
  return stat ? stat->state : 0;
}

// Three replicas r0, r1, r2 (r0 started first, so it leads), one share, and
// a view of etcd. Whatever happens, every replica is stopped (woken first if
// frozen), then every pod they left is deleted by a runtime over the work
// dir, and only then does the etcd cluster go.
struct Ha {
  // `recorded`: an epoch record P/epochs/<volume> put in etcd before any
  // replica starts (another deployment's, one restored from an older copy),
  // on an etcd lease that no longer exists: the share runs above it.
  explicit Ha(uint64_t recorded = 0) {
    if (recorded != 0) {
      etcdserverpb::PutRequest put;
      put.set_key(kEpochKey);
      put.set_value(etcd::EpochRecord(recorded, 0x7a11));
      RequireOk(look->Put(put));
    }
    for (int i = 0; i < 3; ++i) {
      StartReplica(i);
      if (i == 0) {
        REQUIRE_MESSAGE(replicas[0]->WaitOutput("elected leader r0", milliseconds(20'000)),
                        replicas[0]->output());
      }
    }
    REQUIRE_MESSAGE(replicas[0]->WaitOutput(absl::StrCat("vol-ha RUNNING epoch=", recorded + 1),
                                            milliseconds(30'000)),
                    replicas[0]->output());
  }

  // Destroyed after the replicas: alone on the work dir then, a runtime
  // adopts every pod they left and deletes it, waiting until it is gone.
  struct PodSweep {
    std::string work;
    ~PodSweep() {
      auto runtime = LocalPodRuntime::Open(
          {.share_manager_binary = testing_support::ShareManagerBinary(), .work_dir = work});
      if (!runtime.ok()) {
        testing_support::ReportLeftover("pods of " + work +
                                        " not swept: " + std::string(runtime.status().message()));
        return;
      }
      (*runtime)->Shutdown();
    }
  };
  struct Replicas {
    std::vector<std::unique_ptr<testing_support::ProgramProcess>> all{3};
    std::unique_ptr<testing_support::ProgramProcess>& operator[](int i) {
      return all[static_cast<size_t>(i)];
    }
    ~Replicas() {
      for (auto& r : all) {
        if (r && ProcState(r->pid()) == 'T') kill(r->pid(), SIGCONT);
      }
      all.clear();  // SIGTERM (then SIGKILL) each, and reaped
    }
  };

  void StartReplica(int i) {
    replicas[i] = std::make_unique<testing_support::ProgramProcess>(
        std::vector<std::string>{ShareControllerBinary(),
                                 "--work-dir",
                                 work,
                                 "--store",
                                 url,
                                 "--share",
                                 kVolume,
                                 "--replica-id",
                                 "r" + std::to_string(i),
                                 "--leader-ttl",
                                 "3s",
                                 "--pod-lease-ttl",
                                 "4s",
                                 "--pod-lease-drift-margin",
                                 "1s",
                                 "--resync",
                                 "200ms",
                                 "--unhealthy-grace",
                                 "1s",
                                 "--daemon-flag=--grace-period=2",
                                 "--daemon-flag=--lease-lifetime=2",
                                 "--daemon-flag=--stop-timeout=2s"});
  }

  std::string Leader() {
    const auto kv = EtcdGet(*look, kLeaderKey);
    return kv ? kv->value() : "";
  }
  int LeaderIndex() {
    const std::string leader = Leader();
    return leader.size() == 2 ? leader[1] - '0' : -1;
  }
  // Waits until r1 or r2 leads (r0 was SIGKILLed or SIGSTOPped at `since`)
  // and says how long it took; which one leads.
  int AwaitNewLeader(Clock::time_point since, const std::string& what) {
    REQUIRE_MESSAGE(
        WaitFor([&] { return LeaderIndex() == 1 || LeaderIndex() == 2; }, milliseconds(20'000)),
        Describe());
    took = Clock::now() - since;
    MESSAGE("r" << LeaderIndex() << " leads "
                << std::chrono::duration_cast<milliseconds>(took).count() << " ms after the leader "
                << what << " (TTL " << kLeaderTtl.count() << " ms)");
    return LeaderIndex();
  }
  pb::ShareStatusRecord Status() { return RequireOk(store->Get(kVolume)).status(); }
  // The share is RUNNING under `epoch`.
  bool Runs(uint64_t epoch) {
    const auto st = Status();
    return st.phase() == pb::RUNNING && st.epoch() == epoch;
  }
  // The pid and NFS port its record file gives the pod (as the runtime wrote it).
  std::pair<pid_t, uint16_t> PodProcess(const std::string& pod) {
    const auto text = RequireOk(base::ReadFile(work + "/" + kVolume + "/pods/" + pod + ".pod"));
    pid_t pid = 0;
    uint32_t port = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::ConsumePrefix(&line, "pid=")) REQUIRE(absl::SimpleAtoi(line, &pid));
      if (absl::ConsumePrefix(&line, "nfs_port=")) REQUIRE(absl::SimpleAtoi(line, &port));
    }
    return {pid, static_cast<uint16_t>(port)};
  }
  // Everything a failing check needs: who leads, the record, each replica's output.
  std::string Describe() {
    std::string out = "leader: " + Leader() +
                      "\nrecord: " + RequireOk(store->Get(kVolume)).ShortDebugString() + "\n";
    for (int i = 0; i < 3; ++i) {
      if (replicas[i]) out += "--- r" + std::to_string(i) + ":\n" + replicas[i]->output();
    }
    return out;
  }

  testing_support::EtcdCluster etcd;
  testing_support::TempDir dir{"sharemgr-ha"};
  const std::string work = dir.path() + "/work";
  const std::string url = "etcd://" + absl::StrJoin(etcd.endpoints(), ",") + kPrefix;
  std::shared_ptr<etcd::EtcdClient> look =
      RequireOk(etcd::EtcdClient::Create({.endpoints = etcd.endpoints()}));
  std::unique_ptr<EtcdStore> store = RequireOk(EtcdStore::Open(look, kPrefix));
  Clock::duration took{};  // by the last AwaitNewLeader
  PodSweep sweep{work};
  Replicas replicas;
};

// The share as it was, to hold against what it is after a leader change.
struct Serving {
  std::string pod;
  uint64_t epoch = 0;
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  uint16_t nfs_port = 0;
};

Serving Snapshot(Ha& ha) {
  const auto st = ha.Status();
  REQUIRE(st.phase() == pb::RUNNING);
  Serving s{.pod = st.pod(), .epoch = st.epoch()};
  std::tie(s.pid, s.nfs_port) = ha.PodProcess(s.pod);
  REQUIRE(s.pid > 0);
  s.start_ticks = RequireOk(base::ReadProcStat(s.pid)).start_ticks;
  return s;
}

// The same share-manager serves, under the same epoch, RUNNING all along.
void CheckStillServing(Ha& ha, const Serving& before, milliseconds window) {
  CHECK_MESSAGE(HoldsFor(
                    [&] {
                      const auto st = ha.Status();
                      return st.phase() == pb::RUNNING && st.epoch() == before.epoch &&
                             st.pod() == before.pod &&
                             base::ProcessAlive(before.pid, before.start_ticks);
                    },
                    window),
                ha.Describe());
  CHECK(ha.PodProcess(before.pod).first == before.pid);
  CHECK(ha.Status().replacements() == 0);
  CHECK(testing_support::WriteOnce("127.0.0.1", before.nfs_port, std::string("/") + kVolume,
                                   "/after-leader-change", "data", milliseconds(3000))
            .ok());
}

// Every share-manager daemon serving the volume's export dir (a pod, however
// it was started): pid -> its --epoch. A scan of /proc, so a pod started
// behind the runtime's back (no record) is seen too.
std::map<pid_t, std::string> PodDaemons(const Ha& ha) {
  const std::string export_dir = ha.work + "/" + kVolume + "/export";
  std::map<pid_t, std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const auto cmdline = base::ReadFile(entry.path().string() + "/cmdline");
    if (!cmdline.ok()) continue;
    if (base::CmdlineCarries(*cmdline, "--export-dir", export_dir) != base::CmdlineMatch::kYes) {
      continue;
    }
    const std::vector<std::string> args = absl::StrSplit(*cmdline, '\0');
    const auto epoch = std::find(args.begin(), args.end(), "--epoch");
    found[pid] = epoch != args.end() && epoch + 1 != args.end() ? *(epoch + 1) : "?";
  }
  return found;
}

// The pod records in the work dir (names of <pod>.pod files).
std::set<std::string> PodRecords(const Ha& ha) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(ha.work + "/" + kVolume + "/pods")) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// SIGSTOPs etcd members, and SIGCONTs them when told or when it goes, pass or
// fail (before the cluster kills them in its turn).
class FrozenMembers {
 public:
  FrozenMembers(const testing_support::EtcdCluster& etcd, std::vector<int> members) {
    for (int m : members) {
      pids_.push_back(etcd.pid(m));
      REQUIRE(kill(pids_.back(), SIGSTOP) == 0);
    }
  }
  ~FrozenMembers() { Thaw(); }
  void Thaw() {
    for (pid_t pid : pids_) kill(pid, SIGCONT);
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace

TEST_CASE("HA share-controller: bad HA flags are refused before anything starts") {
  testing_support::TempDir dir("sharemgr-ha");
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {ShareControllerBinary(), "--work-dir", dir.path() + "/work"});
    testing_support::ProgramProcess ctl(args);
    const auto exit = ctl.WaitExit(milliseconds(10'000));
    REQUIRE_MESSAGE(exit.has_value(), ctl.output());
    return std::make_pair(exit->ShellCode(), ctl.output());
  };
  auto [code, output] = run({"--leader-ttl", "5s"});
  CHECK(code == 2);
  CHECK(output == "share-controller: --leader-ttl needs --store etcd://... or --kubernetes\n");
  std::tie(code, output) = run({"--store", "etcd://127.0.0.1:1/p", "--leader-ttl", "1500ms"});
  CHECK(code == 2);
  CHECK_MESSAGE(output.find("--leader-ttl must be whole seconds") != std::string::npos, output);
  std::tie(code, output) = run({"--store", "etcd://127.0.0.1:1/p", "--ephemeral-pods"});
  CHECK(code == 2);
  CHECK_MESSAGE(output.find("pods must outlive the leader") != std::string::npos, output);
  CHECK(!std::filesystem::exists(dir.path() + "/work"));
}

TEST_CASE("share-controller --kubernetes: bad election flags are refused, naming the flag") {
  const std::string pod_template =
      std::string(SHAREMGR_SOURCE_DIR) + "/deploy/base/share-manager-pod.yaml";
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), ShareControllerBinary());
    testing_support::ProgramProcess ctl(args);
    const auto exit = ctl.WaitExit(milliseconds(10'000));
    REQUIRE_MESSAGE(exit.has_value(), ctl.output());
    CHECK(exit->ShellCode() == 2);
    return ctl.output();
  };
  CHECK(run({"--leader-lease", "mine"}) == "share-controller: --leader-lease needs --kubernetes\n");
  const std::vector<std::string> k8s = {"--kubernetes", "--pod-template", pod_template};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = k8s;
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  CHECK(with({"--leader-lease", "Not_A_Lease"}) ==
        "share-controller: --leader-lease 'Not_A_Lease' is not a valid Lease name: only lowercase "
        "letters, digits and '-' allowed\n");
  std::string output = with({"--leader-ttl", "1500ms"});
  CHECK_MESSAGE(output.find("--leader-ttl must be whole seconds") != std::string::npos, output);
  output = with({"--replica-id", "two words"});
  CHECK_MESSAGE(output.find("--replica-id") != std::string::npos, output);
  CHECK(with({"--pod-lease-ttl", "10s"}) ==
        "share-controller: --pod-lease-ttl needs --store etcd://...\n");
}

TEST_CASE(
    "HA share-controller: the leader SIGKILLed, another leads within TTL + 1 s and adopts the "
    "running share-manager (same pid and epoch), and SIGTERMed it resigns and a third leads at "
    "once") {
  Ha ha;
  REQUIRE(ha.Leader() == "r0");
  const Serving before = Snapshot(ha);
  CHECK(before.epoch == 1);
  // The pod serves under its serving lease in the same etcd.
  CHECK(RequireOk(EtcdGet(*ha.look, kLeaseKey)).value().substr(0, 21) == "00000000000000000001 ");
  // Followers only watch: no pod of theirs, no "controlling" line.
  CHECK(ha.replicas[1]->WaitOutput("following the leader r0", milliseconds(10'000)));
  CHECK(ha.replicas[1]->output().find("controlling") == std::string::npos);

  kill(ha.replicas[0]->pid(), SIGKILL);
  const int next = ha.AwaitNewLeader(Clock::now(), "was SIGKILLed");
  // etcd expires the lease 2/3 TTL..TTL after the last renewal (every TTL/3),
  // and checks for expired leases every 500 ms; the watch and the campaign
  // take milliseconds (measured: 3.07 s at TTL 3 s). The issue's bound,
  // asserted: should it flake on a loaded machine, widen it here, saying so.
  CHECK(ha.took <= kLeaderTtl + milliseconds(1000));
  REQUIRE(
      ha.replicas[next]->WaitOutput("elected leader r" + std::to_string(next), milliseconds(5000)));
  REQUIRE_MESSAGE(ha.replicas[next]->WaitOutput("controlling 1 share(s)", milliseconds(10'000)),
                  ha.replicas[next]->output());
  // Observed, not restarted: 15 resyncs and 3 unhealthy graces later, the same pod.
  CheckStillServing(ha, before, milliseconds(3000));

  // A clean stop resigns: the third replica leads without waiting the TTL.
  const int third = 3 - next;
  const auto stop_sent = Clock::now();
  const auto stopped = ha.replicas[next]->Stop();
  REQUIRE(stopped.has_value());
  CHECK(stopped->ShellCode() == 0);
  CHECK(ha.replicas[next]->output().find("leadership of r" + std::to_string(next) + " resigned") !=
        std::string::npos);
  REQUIRE_MESSAGE(WaitFor([&] { return ha.LeaderIndex() == third; }, milliseconds(20'000)),
                  ha.Describe());
  MESSAGE("r" << third << " leads " << Ms(Clock::now() - stop_sent)
              << " ms after the leader was SIGTERMed");
  CheckStillServing(ha, before, milliseconds(2000));
}

TEST_CASE(
    "HA share-controller: the leader SIGSTOPped past its TTL is replaced, and woken it writes "
    "nothing to etcd, touches no pod and exits 3, and the share-manager is the same throughout") {
  Ha ha;
  REQUIRE(ha.Leader() == "r0");
  const Serving before = Snapshot(ha);
  auto& old = *ha.replicas[0];
  kill(old.pid(), SIGSTOP);
  const auto frozen = Clock::now();
  const int next = ha.AwaitNewLeader(frozen, "was SIGSTOPped");
  REQUIRE_MESSAGE(ha.replicas[next]->WaitOutput("controlling 1 share(s)", milliseconds(10'000)),
                  ha.replicas[next]->output());
  CheckStillServing(ha, before, milliseconds(2000));
  // Past the old leader's TTL on every clock: its lease is gone in etcd.
  REQUIRE(WaitFor([&] { return Clock::now() - frozen > kLeaderTtl * 2; }, kLeaderTtl * 3));

  // Steady state: nobody writes (an unchanged share is not rewritten, and
  // keep-alives move no revision). Anything that lands while the old leader
  // is awake is its doing.
  const int64_t revision = EtcdRevision(*ha.look);
  const auto record = RequireOk(ha.store->Get(kVolume));
  kill(old.pid(), SIGCONT);
  const auto exit = old.WaitExit(milliseconds(10'000));
  REQUIRE_MESSAGE(exit.has_value(), old.output());
  CHECK_MESSAGE(exit->ShellCode() == kExitNotLeader, old.output());
  CHECK_MESSAGE(old.output().find("not leader any more") != std::string::npos, old.output());
  CHECK_MESSAGE(old.output().find("every pod left running") != std::string::npos, old.output());
  // Nothing reached etcd: not a write, not a revision, and the record is as it was.
  CHECK_MESSAGE(EtcdRevision(*ha.look) == revision, ha.Describe());
  CHECK(RequireOk(ha.store->Get(kVolume)).resource_version() == record.resource_version());
  CHECK(ha.Leader() == "r" + std::to_string(next));
  CheckStillServing(ha, before, milliseconds(2000));
  CHECK(EtcdRevision(*ha.look) == revision);
}

TEST_CASE(
    "HA share-controller: a dead pod's replacement (epoch 2) starts only after epoch 1's serving "
    "lease is gone in etcd and the drift margin has passed") {
  Ha ha;
  const Serving before = Snapshot(ha);
  REQUIRE(EtcdGet(*ha.look, kLeaseKey).has_value());
  const std::string next_pod_record =
      ha.work + "/" + kVolume + "/pods/" + PodName(kVolume, 2) + ".pod";
  // SIGKILL: no clean stop, so its lease stays in etcd until its TTL runs out.
  kill(before.pid, SIGKILL);
  const auto killed = Clock::now();
  std::optional<Clock::time_point> gone, created;
  // When a read last began that still found the key: it went after that.
  Clock::time_point last_present = killed;
  bool saw_waiting = false;
  std::string waiting_for;
  WaitFor(
      [&] {
        if (!gone) {
          const auto asked = Clock::now();
          if (EtcdGet(*ha.look, kLeaseKey)) {
            last_present = asked;
          } else {
            gone = Clock::now();
          }
        }
        if (!created && std::filesystem::exists(next_pod_record)) created = Clock::now();
        if (!saw_waiting) {
          const auto st = ha.Status();
          if (ConditionTrue(st, condition::kWaitingToStart) && st.epoch() == 2) {
            saw_waiting = true;
            waiting_for = FindCondition(st, condition::kWaitingToStart)->message();
          }
        }
        return gone && created;
      },
      milliseconds(30'000));
  REQUIRE_MESSAGE(gone.has_value(), ha.Describe());
  REQUIRE_MESSAGE(created.has_value(), ha.Describe());
  MESSAGE("epoch 1's lease gone " << Ms(*gone - killed) << " ms after its pod was SIGKILLed (TTL "
                                  << kPodLeaseTtl.count() << " ms); epoch 2's pod created "
                                  << Ms(*created - *gone) << " ms after that (drift margin "
                                  << kDriftMargin.count() << " ms)");
  CHECK(saw_waiting);
  CHECK(waiting_for == "the serving lease of epoch 1 to end");
  // Seen by polling, the pod late and the key's end late: the pod appeared
  // no sooner than the margin after the last read that still found the key
  // began (however late under load the polls ran).
  CHECK(*created - last_present >= kDriftMargin);
  REQUIRE_MESSAGE(WaitFor([&] { return ha.Runs(2); }, milliseconds(30'000)), ha.Describe());
  CHECK(RequireOk(EtcdGet(*ha.look, kLeaseKey)).value().substr(0, 21) == "00000000000000000002 ");
  CHECK(ha.Leader() == "r0");  // one leader throughout
}

TEST_CASE(
    "HA share-controller: an epoch recorded in etcd above the share's (another deployment's, a "
    "restored record) moves the share above it before any pod starts: it serves under recorded + "
    "1, and NFS writes land") {
  Ha ha(41);
  const Serving serving = Snapshot(ha);
  CHECK(serving.epoch == 42);
  CHECK(serving.pod == PodName(kVolume, 42));
  // No pod under a lower epoch ever started (it would have been refused the
  // lease): no log of epoch 1's, one pod record.
  CHECK_FALSE(
      std::filesystem::exists(ha.work + "/" + kVolume + "/" + PodName(kVolume, 1) + ".log"));
  CHECK(PodRecords(ha) == std::set<std::string>{PodName(kVolume, 42) + ".pod"});
  const auto st = ha.Status();
  CHECK(st.replacements() == 0);
  const Condition* advanced = FindCondition(st, condition::kEpochAdvanced);
  REQUIRE_MESSAGE(advanced != nullptr, ha.Describe());
  CHECK(advanced->status());
  CHECK(advanced->reason() == "RecordedByOther");
  CHECK(advanced->message() == "epoch 1 is not above epoch 41 taken in etcd: moved to epoch 42");
  CHECK(RequireOk(EtcdGet(*ha.look, kLeaseKey)).value().substr(0, 21) ==
        etcd::PaddedEpoch(42) + " ");
  CHECK(etcd::EpochOf(RequireOk(EtcdGet(*ha.look, kEpochKey)).value()) == 42u);
  // Served once its NFS grace period (2 s here) is over.
  CHECK(WaitFor(
      [&] {
        return testing_support::WriteOnce("127.0.0.1", serving.nfs_port, std::string("/") + kVolume,
                                          "/above-recorded", "data", milliseconds(1000))
            .ok();
      },
      milliseconds(15'000)));
}

TEST_CASE(
    "HA share-controller: the lease key deleted by hand (etcdctl del) while the holder's etcd "
    "lease lives: no new pod until that lease is gone, then the drift margin") {
  Ha ha;
  const Serving before = Snapshot(ha);
  const auto held = EtcdGet(*ha.look, kLeaseKey);
  REQUIRE(held.has_value());
  const int64_t lease = held->lease();
  const std::string next_pod_record =
      ha.work + "/" + kVolume + "/pods/" + PodName(kVolume, 2) + ".pod";
  // The holder goes without a word (SIGKILL: no revoke), while its etcd lease
  // is kept alive from here, as a holder cut off from the controller but not
  // from etcd renews it, and would serve on until it reads its key gone.
  etcd::LeaseKeepAliveStream keep_alive(*ha.look);
  const auto renew = [&] {
    const auto kept = keep_alive.KeepAlive(
        lease, std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
    return kept.ok() && kept->ttl() > 0;
  };
  REQUIRE(renew());
  // The key first: the controller never sees it held once the holder is gone.
  etcdserverpb::DeleteRangeRequest del;
  del.set_key(kLeaseKey);
  RequireOk(ha.look->DeleteRange(del));
  kill(before.pid, SIGKILL);
  // The replacement's epoch is recorded and it waits for the lease.
  std::string waiting_for;
  auto last_renewal = Clock::now();
  const auto renew_now_and_then = [&] {
    if (Clock::now() - last_renewal >= milliseconds(500)) {
      REQUIRE(renew());
      last_renewal = Clock::now();
    }
  };
  REQUIRE_MESSAGE(WaitFor(
                      [&] {
                        renew_now_and_then();
                        const auto st = ha.Status();
                        const Condition* c = FindCondition(st, condition::kWaitingToStart);
                        if (st.epoch() != 2 || c == nullptr || !c->status()) return false;
                        waiting_for = c->message();
                        return true;
                      },
                      milliseconds(20'000)),
                  ha.Describe());
  CHECK(waiting_for ==
        absl::StrCat("the etcd lease ", absl::Hex(lease), " of epoch 1 to end (its key is gone)"));
  // Several drift margins with the lease alive: no pod.
  CHECK_MESSAGE(HoldsFor(
                    [&] {
                      renew_now_and_then();
                      return !std::filesystem::exists(next_pod_record);
                    },
                    3 * kDriftMargin),
                ha.Describe());
  // The lease ends (its holder stopped at last): the pod follows, a margin later.
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease);
  keep_alive.Close();
  // Taken before the revoke is sent: the controller can only see it gone after.
  const auto revoked = Clock::now();
  RequireOk(ha.look->LeaseRevoke(revoke));
  std::optional<Clock::time_point> created;
  WaitFor(
      [&] {
        if (std::filesystem::exists(next_pod_record)) created = Clock::now();
        return created.has_value();
      },
      milliseconds(20'000));
  REQUIRE_MESSAGE(created.has_value(), ha.Describe());
  MESSAGE("epoch 2's pod created " << Ms(*created - revoked)
                                   << " ms after epoch 1's etcd lease was revoked (drift margin "
                                   << kDriftMargin.count() << " ms)");
  CHECK(*created - revoked >= kDriftMargin);
  REQUIRE_MESSAGE(WaitFor([&] { return ha.Runs(2); }, milliseconds(30'000)), ha.Describe());
}

TEST_CASE(
    "HA share-controller: etcd quorum lost (2 of 3 members SIGSTOPped): the leader stops acting "
    "and exits 3, nothing is replaced, deleted or written: the share-manager serves until its own "
    "lease runs out and fences itself. With the quorum back, a new leader replaces it under epoch "
    "2 and every acknowledged write is there") {
  Ha ha;
  REQUIRE(ha.Leader() == "r0");
  const Serving before = Snapshot(ha);
  REQUIRE(before.epoch == 1);
  const std::string old_log = ha.work + "/" + kVolume + "/" + before.pod + ".log";
  const std::map<pid_t, std::string> daemons_before{{before.pid, "1"}};
  REQUIRE(PodDaemons(ha) == daemons_before);
  const std::set<std::string> records = PodRecords(ha);
  const int64_t revision = EtcdRevision(*ha.look);
  // What the member left alone has committed (a serializable read: it
  // answers without a quorum).
  const auto lone = RequireOk(etcd::EtcdClient::Create({.endpoints = {ha.etcd.endpoint(0)}}));
  const auto lone_revision = [&]() -> int64_t {
    etcdserverpb::RangeRequest request;
    request.set_key("any");
    request.set_serializable(true);
    const auto got = lone->Range(request);
    return got.ok() ? got->header().revision() : -1;
  };
  std::vector<std::string> acknowledged;
  int written = 0;
  const auto write = [&](uint16_t port) {
    const std::string name = "/quorum-" + std::to_string(written++) + ".txt";
    const bool ok = testing_support::WriteOnce("127.0.0.1", port, std::string("/") + kVolume, name,
                                               name, milliseconds(1000))
                        .ok();
    if (ok) acknowledged.push_back(name);
    return ok;
  };
  REQUIRE(write(before.nfs_port));

  FrozenMembers frozen(ha.etcd, {1, 2});
  const auto cut = Clock::now();
  // The share-manager serves on its lease (at most TTL - fence margin after
  // its last renewal) while no replica can do anything: no new pod, no
  // record gone, nothing committed.
  int acknowledged_after_cut = 0;
  std::optional<Clock::time_point> refused;
  const auto nobody_acts = [&] {
    const auto daemons = PodDaemons(ha);
    return PodRecords(ha) == records && lone_revision() == revision &&
           std::all_of(daemons.begin(), daemons.end(),
                       [&](const auto& d) { return d.first == before.pid; });
  };
  bool acted = false;
  // Without a quorum the record cannot be read: what the work dir and /proc say.
  const auto outage = [&] {
    std::string out = "pod records:";
    for (const auto& r : PodRecords(ha)) out += " " + r;
    out += "\nshare-manager daemons:";
    for (const auto& [pid, epoch] : PodDaemons(ha)) {
      out += " " + std::to_string(pid) + " (epoch " + epoch + ")";
    }
    return out + "\nrevision on the lone member: " + std::to_string(lone_revision()) + ", was " +
           std::to_string(revision);
  };
  WaitFor(
      [&] {
        acted = acted || !nobody_acts();
        if (!write(before.nfs_port)) refused = Clock::now();
        acknowledged_after_cut += refused ? 0 : 1;
        return refused.has_value();
      },
      milliseconds(30'000));
  REQUIRE_MESSAGE(refused.has_value(), "the share-manager still serves 30 s after the quorum went");
  MESSAGE(acknowledged_after_cut << " NFS writes acknowledged after the quorum went; the first "
                                 << "refused " << Ms(*refused - cut) << " ms after (pod lease TTL "
                                 << kPodLeaseTtl.count() << " ms)");
  CHECK(acknowledged_after_cut > 0);
  CHECK_MESSAGE(!acted, outage());
  // Fenced by its own lease, as docs/DESIGN-NOTES.md "Quorum loss" says: FAILED lease lost.
  CHECK_MESSAGE(WaitFor(
                    [&] {
                      const auto log = base::ReadFile(old_log);
                      return log.ok() && log->find("-> FAILED: lease lost: no renewal confirmed") !=
                                             std::string::npos;
                    },
                    milliseconds(10'000)),
                base::ReadFile(old_log).value_or("(no log)"));
  // The leader stopped acting at its own valid_until and exited 3, leaving
  // the pod; the followers wait.
  auto& old_leader = *ha.replicas[0];
  const auto exit = old_leader.WaitExit(milliseconds(10'000));
  REQUIRE_MESSAGE(exit.has_value(), old_leader.output());
  CHECK_MESSAGE(exit->ShellCode() == kExitNotLeader, old_leader.output());
  CHECK_MESSAGE(old_leader.output().find("every pod left running") != std::string::npos,
                old_leader.output());
  // A whole pod lease TTL more without a quorum: still nobody acts, and the
  // fenced share-manager never answers a write again.
  CHECK_MESSAGE(HoldsFor(nobody_acts, kPodLeaseTtl), outage());
  CHECK_FALSE(write(before.nfs_port));
  for (int i = 1; i < 3; ++i) {
    CHECK_MESSAGE(!ha.replicas[i]->WaitOutput("elected leader", milliseconds(1)),
                  ha.replicas[i]->output());
  }

  frozen.Thaw();
  const auto restored = Clock::now();
  const int next = ha.AwaitNewLeader(restored, "(r0) exited and the quorum came back");
  REQUIRE_MESSAGE(ha.replicas[next]->WaitOutput("controlling 1 share(s)", milliseconds(10'000)),
                  ha.replicas[next]->output());
  REQUIRE_MESSAGE(WaitFor([&] { return ha.Runs(2); }, milliseconds(60'000)), ha.Describe());
  MESSAGE("epoch 2 RUNNING " << Ms(Clock::now() - restored) << " ms after the quorum came back");
  const Serving after = Snapshot(ha);
  CHECK(after.pod == PodName(kVolume, 2));
  CHECK(RequireOk(EtcdGet(*ha.look, kLeaseKey)).value().substr(0, 21) == "00000000000000000002 ");
  CHECK(!base::ProcessAlive(before.pid, before.start_ticks));
  CHECK(PodDaemons(ha) == std::map<pid_t, std::string>{{after.pid, "2"}});
  // Served again once its NFS grace period (2 s here) is over.
  REQUIRE(WaitFor([&] { return write(after.nfs_port); }, milliseconds(15'000)));
  // Every write either server acknowledged is there, whole.
  for (const auto& name : acknowledged) {
    const auto read =
        testing_support::ReadOnce("127.0.0.1", after.nfs_port, std::string("/") + kVolume, name);
    CHECK_MESSAGE(read.ok(), name, ": ", read.status().ToString());
    if (read.ok()) CHECK(*read == name);
  }
}

TEST_CASE(
    "HA share-controller over etcd mTLS: the pod it starts gets the controller's etcd TLS files "
    "(--lease-etcd-dir) and serves under its serving lease") {
  testing_support::TempDir certs("ha-etcd-tls");
  const testing_support::TestCa ca(certs.path(), "etcd-ca");
  // One Secret for the controller and its pods, as Kubernetes mounts it in both.
  const std::string secret = testing_support::WriteSecretDir(
      certs.path() + "/etcd-client", ca.Issue("client", "controller", {"DNS:controller"}));
  const auto security = RequireOk(base::ResolveClientSecurity({.dir = secret}));
  testing_support::EtcdCluster etcd({.members = 1,
                                     .server_tls = ca.Issue("etcd", "etcd", {"IP:127.0.0.1"}),
                                     .client_security = security});
  testing_support::TempDir dir("sharemgr-ha-tls");
  const std::string work = dir.path() + "/work";
  auto look =
      RequireOk(etcd::EtcdClient::Create({.endpoints = etcd.endpoints(), .security = security}));
  // Declared after etcd: the controller stops first, then its pod is swept.
  Ha::PodSweep sweep{work};
  testing_support::ProgramProcess ctl(
      {ShareControllerBinary(), "--work-dir", work, "--store",
       "etcd://" + absl::StrJoin(etcd.endpoints(), ",") + kPrefix, "--etcd-dir", secret, "--share",
       kVolume, "--replica-id", "r0", "--pod-lease-ttl", "4s", "--resync", "200ms",
       "--daemon-flag=--grace-period=2", "--daemon-flag=--lease-lifetime=2",
       "--daemon-flag=--stop-timeout=2s"});
  REQUIRE_MESSAGE(ctl.WaitOutput("vol-ha RUNNING epoch=1", milliseconds(30'000)), ctl.output());
  // The pod took its lease in the TLS etcd (a plaintext pod could not).
  const auto held = EtcdGet(*look, kLeaseKey);
  REQUIRE(held.has_value());
  CHECK(held->value().substr(0, 21) == "00000000000000000001 ");
  // With the controller's files, the path made absolute.
  bool pod_has_files = false;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto cmdline = base::ReadFile(entry.path().string() + "/cmdline");
    if (!cmdline.ok() ||
        base::CmdlineCarries(*cmdline, "--export-dir", work + "/" + kVolume + "/export") !=
            base::CmdlineMatch::kYes) {
      continue;
    }
    pod_has_files =
        base::CmdlineCarries(*cmdline, "--lease-etcd-dir", secret) == base::CmdlineMatch::kYes;
  }
  CHECK(pod_has_files);
}

}  // namespace controller
