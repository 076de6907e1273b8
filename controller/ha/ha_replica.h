// A share-controller replica of a highly available deployment (docs/DESIGN-NOTES.md "Highly
// available share-controller"): with `--store etcd://...`, every replica
// campaigns for P/leader; followers only watch. Once elected the replica
// sets the store's write guard (P/leader's create_revision), and only then
// observes (adopts the pods recorded in the shared work dir, reads the store)
// and reconciles, through gates: a pod Create or Delete goes out only while
// its leadership is valid on its own monotonic clock, and a new pod waits
// until the previous one's serving lease is gone (ServingLeaseGate).
// Deposed (the lease lost or expired on its clock, a write refused by the
// guard, a gate refusal) it exits kExitNotLeader at once, leaving every pod
// running for the next leader to adopt.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/file_lock.h"
#include "controller/ha/leader_election.h"
#include "controller/ha/leader_gate.h"
#include "controller/ha/serving_lease_gate.h"
#include "controller/store/etcd_store.h"
#include "etcd/client.h"

namespace controller {

// share-controller's exit code when it lost the leadership (or never may act
// again): it stopped acting and left its pods running.
inline constexpr int kExitNotLeader = 3;

// The HA flags as given (share-controller --help).
struct HaFlags {
  std::string leader_ttl = "5s";
  std::string replica_id;  // default: <hostname>-<pid>
  bool pod_leases = true;
  std::string pod_lease_ttl = "10s";
  std::string pod_lease_drift_margin;  // default: etcd::DefaultLeaseDriftMargin(TTL)
};
void AddHaFlags(CLI::App& app, HaFlags& flags);

// This replica in a leader election, from --replica-id and --leader-ttl:
// InvalidArgument naming the flag.
struct LeaderFlags {
  std::string id;
  base::Duration ttl{5000};
};
absl::StatusOr<LeaderFlags> ResolveLeaderFlags(const HaFlags& flags);

// Pods' serving leases, in the store's etcd.
struct PodLeaseOptions {
  std::string prefix;  // P of P/leases/<volume>: the store's, or /sharemgr without one
  base::Duration ttl{10'000};
  base::Duration drift_margin{500};
  // The store's etcd TLS flags as given, passed on as the pods'
  // --lease-etcd-*: in Kubernetes the same Secret is mounted in both.
  base::TlsFlags etcd_tls;
};

struct HaReplicaOptions {
  std::vector<std::string> endpoints;
  base::ClientSecurity security;
  std::string prefix;  // the store's: P/leader
  std::string id;
  base::Duration leader_ttl{5000};
  std::optional<PodLeaseOptions> pod_leases;
  // Locked shared for the replica's lifetime (see LocalPodRuntimeOptions::share_work_dir).
  std::string work_dir;
};

// The replica's options from the flags and the store's URL; InvalidArgument
// naming the flag. `store_tls`: the store's --etcd-* flags (checked into
// `security`), which the pods' serving leases use too.
absl::StatusOr<HaReplicaOptions> ResolveHaReplica(const HaFlags& flags, const etcd::EtcdUrl& url,
                                                  const base::ClientSecurity& security,
                                                  const base::TlsFlags& store_tls,
                                                  const std::string& work_dir);
// InvalidArgument naming the first HA flag given in `app`: they need --store
// etcd://, but for --leader-ttl and --replica-id, which --kubernetes takes too
// (`kubernetes`: it was given).
absl::Status RefuseHaFlagsWithoutEtcd(const CLI::App& app, bool kubernetes);

// The default deposed hook: logs why, flushes the log and _exits
// kExitNotLeader from whatever thread noticed, running nothing else on the
// way out (no destructor could delete a pod or write the store).
[[noreturn]] void ExitNotLeader(const std::string& why);

class HaReplica {
 public:
  // Locks the work dir shared and starts campaigning. `store` is where the
  // leader writes (its write guard is set once elected); `deposed` is told
  // when this replica must stop acting (ExitNotLeader in share-controller).
  static absl::StatusOr<std::unique_ptr<HaReplica>> Start(HaReplicaOptions options,
                                                          EtcdStore& store,
                                                          DeposedHook deposed = ExitNotLeader);
  ~HaReplica();

  // Blocks until this replica leads (true; the store's writes carry its
  // write guard from then on) or one of `signals` (blocked in every thread)
  // arrives (false, and *sig is it).
  bool AwaitLeadership(const sigset_t& signals, int* sig);
  bool Leading() const;

  // Flags for every pod: the serving lease in this etcd (none without pod leases).
  std::vector<std::string> PodDaemonFlags() const;
  // What the leader acts through: `runtime` behind the serving lease gate
  // (with pod leases) and the leadership gate. Call once; owned here.
  PodRuntime& Acting(PodRuntime& runtime);
  // What the leader writes through: a write refused as not leader deposes.
  Store& acting_store() { return leader_store_; }

  // A clean stop, after acting ended: gives the leadership up so a follower
  // takes over at once instead of after the TTL.
  void Resign();

 private:
  HaReplica(HaReplicaOptions options, EtcdStore& store, DeposedHook deposed,
            std::shared_ptr<etcd::EtcdClient> election_client, base::FileLock work_dir_lock);

  const HaReplicaOptions options_;
  EtcdStore& store_;
  const DeposedHook deposed_;
  base::FileLock work_dir_lock_;
  LeaderStore leader_store_;
  std::unique_ptr<ElectionBackend> backend_;
  mutable absl::Mutex mu_;
  bool elected_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<LeaderElection> election_;
  std::unique_ptr<ServingLeaseGate> lease_gate_;
  std::unique_ptr<LeaderGatedRuntime> leader_gate_;
};

}  // namespace controller
