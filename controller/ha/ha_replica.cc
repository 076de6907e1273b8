#include "controller/ha/ha_replica.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "base/fmt_absl.h"
#include "base/validate.h"
#include "controller/ha/etcd_election.h"
#include "etcd/lease_validity.h"

namespace controller {
namespace {

using base::Duration;

// The share-manager's --lease-prefix default, for a store without a prefix.
constexpr char kDefaultPodLeasePrefix[] = "/sharemgr";

// A lease TTL flag's value, as etcd::ValidateLeaseTtl takes it.
absl::StatusOr<Duration> Ttl(const std::string& flag, const std::string& text) {
  auto d = base::ParseFlagDuration(flag, text);
  if (!d.ok()) return d.status();
  if (auto s = etcd::ValidateLeaseTtl(flag, *d); !s.ok()) return s;
  return *d;
}

std::string DefaultReplicaId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return absl::StrCat(getpid());
  return absl::StrCat(host, "-", getpid());
}

}  // namespace

void AddHaFlags(CLI::App& app, HaFlags& flags) {
  app.add_option("--leader-ttl", flags.leader_ttl,
                 "With --store etcd:// or --kubernetes: the leader election's lease TTL (whole "
                 "seconds, 2s-5m); "
                 "renewed every TTL/3, a follower takes over within it when the leader dies")
      ->capture_default_str();
  app.add_option("--replica-id", flags.replica_id,
                 "With --store etcd:// or --kubernetes: this replica's name in PREFIX/leader or "
                 "the Lease's holderIdentity (default <hostname>-<pid>; unique per replica)");
  app.add_option("--pod-leases", flags.pod_leases,
                 "With --store etcd://: pods serve only under their serving lease in the same etcd "
                 "(share-manager --lease-etcd), and a replacement starts only once the old pod's "
                 "lease is gone and the drift margin has passed")
      ->capture_default_str();
  app.add_option("--pod-lease-ttl", flags.pod_lease_ttl,
                 "The pods' serving lease TTL (their --lease-ttl; whole seconds, 2s-5m)")
      ->capture_default_str();
  app.add_option("--pod-lease-drift-margin", flags.pod_lease_drift_margin,
                 "Wait this long after the old pod's lease is gone before starting its "
                 "replacement (default max(500ms, TTL/50))");
}

absl::Status RefuseHaFlagsWithoutEtcd(const CLI::App& app, bool kubernetes) {
  for (const char* flag : {"--leader-ttl", "--replica-id"}) {
    if (!kubernetes && app.count(flag) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " needs --store etcd://... or --kubernetes"));
    }
  }
  for (const char* flag : {"--pod-leases", "--pod-lease-ttl", "--pod-lease-drift-margin"}) {
    if (app.count(flag) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs --store etcd://..."));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LeaderFlags> ResolveLeaderFlags(const HaFlags& flags) {
  LeaderFlags leader{.id = flags.replica_id.empty() ? DefaultReplicaId() : flags.replica_id};
  if (auto s = base::ValidateOption("--replica-id", leader.id, " "); !s.ok()) return s;
  auto ttl = Ttl("--leader-ttl", flags.leader_ttl);
  if (!ttl.ok()) return ttl.status();
  leader.ttl = *ttl;
  return leader;
}

absl::StatusOr<HaReplicaOptions> ResolveHaReplica(const HaFlags& flags, const etcd::EtcdUrl& url,
                                                  const base::ClientSecurity& security,
                                                  const base::TlsFlags& store_tls,
                                                  const std::string& work_dir) {
  auto leader = ResolveLeaderFlags(flags);
  if (!leader.ok()) return leader.status();
  HaReplicaOptions options{.endpoints = url.endpoints,
                           .security = security,
                           .prefix = url.prefix,
                           .id = leader->id,
                           .leader_ttl = leader->ttl,
                           .work_dir = work_dir};
  if (!flags.pod_leases) return options;
  auto pod_ttl = Ttl("--pod-lease-ttl", flags.pod_lease_ttl);
  if (!pod_ttl.ok()) return pod_ttl.status();
  PodLeaseOptions leases{.prefix = url.prefix.empty() ? kDefaultPodLeasePrefix : url.prefix,
                         .ttl = *pod_ttl,
                         .drift_margin = etcd::DefaultLeaseDriftMargin(*pod_ttl),
                         .etcd_tls = store_tls};
  if (!flags.pod_lease_drift_margin.empty()) {
    auto drift = base::ParseFlagDuration("--pod-lease-drift-margin", flags.pod_lease_drift_margin);
    if (!drift.ok()) return drift.status();
    if (*drift > leases.ttl) {
      return absl::InvalidArgumentError(
          "--pod-lease-drift-margin: must not exceed --pod-lease-ttl");
    }
    leases.drift_margin = *drift;
  }
  options.pod_leases = leases;
  return options;
}

void ExitNotLeader(const std::string& why) {
  spdlog::critical("not leader any more: {}; exiting {}, every pod left running", why,
                   kExitNotLeader);
  spdlog::default_logger()->flush();
  _exit(kExitNotLeader);
}

HaReplica::HaReplica(HaReplicaOptions options, EtcdStore& store, DeposedHook deposed,
                     std::shared_ptr<etcd::EtcdClient> election_client,
                     base::FileLock work_dir_lock)
    : options_(std::move(options)),
      store_(store),
      deposed_(std::move(deposed)),
      work_dir_lock_(std::move(work_dir_lock)),
      leader_store_(store, deposed_),
      backend_(MakeEtcdElectionBackend(std::move(election_client), options_.prefix, options_.id,
                                       base::BootClock())) {
  election_ = std::make_unique<LeaderElection>(
      *backend_, base::BootClock(),
      LeaderElectionOptions{.id = options_.id, .ttl = options_.leader_ttl},
      LeaderElection::Hooks{.elected =
                                [this](int64_t token) {
                                  // Guarded before anything is written as the leader.
                                  store_.SetWriteGuard(LeaderWriteGuard(options_.prefix, token));
                                  absl::MutexLock lock(&mu_);
                                  elected_ = true;
                                },
                            .deposed = deposed_});
}

absl::StatusOr<std::unique_ptr<HaReplica>> HaReplica::Start(HaReplicaOptions options,
                                                            EtcdStore& store, DeposedHook deposed) {
  auto lock = base::FileLock::Acquire(options.work_dir, base::FileLock::Kind::kDirectory,
                                      "share-controller", base::FileLock::Sharing::kShared);
  if (!lock.ok()) return lock.status();
  // Its own connection, each call bounded to fit a renewal (the store's
  // --etcd-timeout is for records).
  auto client =
      etcd::EtcdClient::Create({.endpoints = options.endpoints,
                                .call_timeout = etcd::LeaseCallTimeout(options.leader_ttl),
                                .security = options.security});
  if (!client.ok()) return client.status();
  std::unique_ptr<HaReplica> replica(new HaReplica(std::move(options), store, std::move(deposed),
                                                   *std::move(client), *std::move(lock)));
  spdlog::info("replica {} campaigning for {} (TTL {})", replica->options_.id,
               LeaderKey(replica->options_.prefix),
               base::FormatDuration(replica->options_.leader_ttl));
  replica->election_->Start();
  return replica;
}

HaReplica::~HaReplica() { election_->Stop(LeaderElection::StopMode::kLetExpire).IgnoreError(); }

bool HaReplica::AwaitLeadership(const sigset_t& signals, int* sig) {
  return AwaitUnlessSignalled([this] { return Leading(); }, signals, sig);
}

bool HaReplica::Leading() const {
  absl::MutexLock lock(&mu_);
  return elected_;
}

std::vector<std::string> HaReplica::PodDaemonFlags() const {
  if (!options_.pod_leases) return {};
  const PodLeaseOptions& leases = *options_.pod_leases;
  std::vector<std::string> flags = {
      "--lease-etcd",         absl::StrJoin(options_.endpoints, ","),
      "--lease-prefix",       leases.prefix,
      "--lease-ttl",          absl::StrCat(leases.ttl.count() / 1000, "s"),
      "--lease-drift-margin", absl::StrCat(leases.drift_margin.count(), "ms")};
  for (auto& flag : base::ClientTlsArgsAs(leases.etcd_tls, "--lease-etcd-")) {
    flags.push_back(std::move(flag));
  }
  return flags;
}

PodRuntime& HaReplica::Acting(PodRuntime& runtime) {
  PodRuntime* inner = &runtime;
  if (options_.pod_leases) {
    lease_gate_ = std::make_unique<ServingLeaseGate>(
        runtime, store_.client(),
        ServingLeaseGateOptions{.prefix = options_.pod_leases->prefix,
                                .drift_margin = options_.pod_leases->drift_margin},
        base::BootClock());
    inner = lease_gate_.get();
  }
  leader_gate_ = std::make_unique<LeaderGatedRuntime>(
      *inner, [this] { return election_->LeadingAt(base::BootClock().Now()); }, deposed_);
  return *leader_gate_;
}

void HaReplica::Resign() { election_->Stop(LeaderElection::StopMode::kResign).IgnoreError(); }

}  // namespace controller
