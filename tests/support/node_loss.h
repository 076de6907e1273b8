// Node loss, end to end (issue #12), for the integration test and the
// benchmark alike: share-manager epoch N serves a loop device from inside a
// test network namespace (the "node"), etcd and an NFS client on the host;
// the client writes numbered records; the node is cut off (its veth end down)
// while it writes; epoch N+1 is started on the host at the cut and waits for
// the serving lease as share-manager does; the client writes on through it;
// then the link is healed. What happened, and when, is returned for the
// caller to check or to tabulate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/loop_device.h"
#include "tests/support/net_namespace.h"

namespace testing_support {

struct NodeLossSetup {
  const NetNamespace& node;
  // Listening on node.host_address() too (Options::also_listen_on).
  const EtcdCluster& cluster;
  const LoopDevice& volume;
};

struct NodeLossOptions {
  uint64_t old_epoch = 1;  // the new one serves under old_epoch + 1
  std::string ttl = "4s";
  // The old one's --failed-linger: long enough to still run (fenced) when
  // the link heals, so that what it does then is seen.
  std::string old_failed_linger = "15s";
  // The cut comes this long after a renewal the old one logged (0: just
  // after it, the longest the old one stays valid; the renewal interval is
  // TTL/3).
  absl::Duration cut_after_renewal = absl::ZeroDuration();
  // Waited after the heal, the client still writing to the old address.
  absl::Duration after_heal = absl::Seconds(3);
  // Wait for the old one's exit (its fence code) before returning.
  bool wait_old_exit = true;
  // Extra flags for the old one (e.g. a mutant's).
  std::vector<std::string> old_flags;
};

struct NodeLossRun {
  // One write the client got acknowledged: record `number` (a file
  // "/record-<number>" holding that name) by the old (0) or new (1) server,
  // written from the host or from inside the node's namespace.
  struct Ack {
    int number;
    int server;
    absl::Time at;
    bool from_node;
  };
  std::vector<Ack> acks;
  // Records acknowledged but not read back, or read back wrong, through the
  // new server afterwards: "record-7: <what was read>".
  std::vector<std::string> lost;

  absl::Time cut, healed;
  // The new one reached SERVING and acknowledged writes.
  bool new_served = false;
  // From the old one's log: the last valid_until its renewals gave, its fence
  // ("-> FAILED: lease lost"), its unmount of the volume.
  std::optional<absl::Time> old_valid_until, old_fenced, old_unmounted;
  // From the new one's log: lease taken, volume mounted, SERVING.
  std::optional<absl::Time> new_taken, new_mounted, new_serving;
  // The old one's export dir was still mounted when the new one mounted the
  // volume, or when the test saw it SERVING.
  bool old_mounted_when_new_served = false;
  // After the heal: the old one's NFS port answered a NULL call or a write.
  bool old_nfs_answered_after_heal = false;
  // After the heal, while still running: its state over gRPC ("" if it had exited).
  std::string old_state_after_heal;
  int old_ganesha_starts = 0;
  std::optional<int> old_exit_code;
  // Processes naming the old one's state dir (its ganesha, its fencer) left
  // after it exited.
  bool old_left_processes = false;
  std::string old_log, new_log;

  std::optional<absl::Time> LastAck(int server) const;
  std::optional<absl::Time> FirstAck(int server) const;
  // Acks by `server` later than `t`.
  int AcksAfter(int server, absl::Time t) const;
};

// Runs the scenario once; REQUIREs what it cannot go on without (the old
// one serving before the cut). Every process it starts is gone when it
// returns; the volume is left unmounted.
NodeLossRun RunNodeLoss(const NodeLossSetup& setup, const NodeLossOptions& options);

}  // namespace testing_support
