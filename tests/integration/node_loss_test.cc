// Node loss end to end (issue #12): the share-manager's node cut off from
// etcd and from its NFS client while the client writes; the old one fences
// itself, the next epoch takes over on the same volume, nothing acknowledged
// is lost, and the old one stays dead when the link heals. The scenario is
// tests/support/node_loss.h (bench/node_loss_bench.cc times it).
#include "tests/support/node_loss.h"

#include <doctest/doctest.h>

#include <string>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "sharemgr/exit_codes.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/make_loop.h"
#include "tests/support/net_namespace.h"
#include "tests/support/require_ok.h"

namespace {

using testing_support::EtcdCluster;
using testing_support::NetNamespace;
using testing_support::NodeLossRun;
using testing_support::RequireOk;

constexpr int kOld = 0, kNew = 1;

// The fence comes at valid_until on the old share-manager's clock and is
// logged, or seen by the client, a little later (the kill, the log line, the
// answer in flight). Less than the fence margin (800 ms at TTL 4 s): still
// before etcd could expire the lease.
constexpr absl::Duration kNoticeSlack = absl::Milliseconds(500);

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

TEST_CASE(
    "node loss 1. the node cut off while a client writes: the old share-manager fences itself at "
    "valid_until and unmounts, epoch+1 takes the lease once etcd expired it and serves the same "
    "volume, every acknowledged write survives, and the healed node never serves again") {
  // Declared in this order so they go in reverse: servers (inside the run),
  // volume, etcd, then the namespace etcd listens in.
  const NetNamespace node;
  EtcdCluster cluster({.also_listen_on = node.host_address()});
  const auto volume = testing_support::MakeLoop("ext4");
  const NodeLossRun run = testing_support::RunNodeLoss(
      {.node = node, .cluster = cluster, .volume = *volume}, {.old_epoch = 3, .ttl = "4s"});
  const std::string logs = "old:\n" + run.old_log + "\nnew:\n" + run.new_log;
  INFO(logs);
  CHECK(run.new_served);
  // A write acknowledged by the old one after the new took the lease: two
  // servers of one volume at once.
  if (run.new_taken) CHECK(run.AcksAfter(kOld, *run.new_taken) == 0);

  const auto valid_until = RequireOk(run.old_valid_until);
  const auto fenced = RequireOk(run.old_fenced);
  const auto taken = RequireOk(run.new_taken);
  const auto last_old = RequireOk(run.LastAck(kOld));
  const auto first_new = RequireOk(run.FirstAck(kNew));
  MESSAGE("cut -> old fenced ", Ms(fenced - run.cut), " ms (valid_until at cut + ",
          Ms(valid_until - run.cut), " ms); cut -> new took the lease ", Ms(taken - run.cut),
          " ms; cut -> new SERVING ", Ms(RequireOk(run.new_serving) - run.cut),
          " ms; last old ack -> first new ack ", Ms(first_new - last_old), " ms; ", run.acks.size(),
          " writes acknowledged");

  // The old one fenced itself, on its own clock, before etcd let the next in.
  CHECK_MESSAGE(fenced <= valid_until + kNoticeSlack, logs);
  CHECK_MESSAGE(fenced < taken, logs);
  // No write acknowledged by the old one after its validity ended, nor after
  // the new one took the lease.
  CHECK_MESSAGE(last_old <= valid_until + kNoticeSlack, logs);
  CHECK(last_old < first_new);
  // The fence unmounted the volume before the new one mounted it; never
  // mounted by both at once.
  CHECK_MESSAGE(RequireOk(run.old_unmounted) < RequireOk(run.new_mounted), logs);
  CHECK_FALSE(run.old_mounted_when_new_served);
  // Every write either server acknowledged is there, through the new one.
  CHECK_MESSAGE(run.lost.empty(), absl::StrJoin(run.lost, "\n"));

  // Healed: it reached etcd again, and stayed fenced.
  CHECK_MESSAGE(run.old_state_after_heal == "FAILED", run.old_state_after_heal, "\n", logs);
  CHECK(run.AcksAfter(kOld, run.healed) == 0);
  CHECK_FALSE(run.old_nfs_answered_after_heal);
  CHECK(run.old_ganesha_starts == 1);
  CHECK(run.old_exit_code == sharemgr::kExitLeaseLost);
  CHECK_FALSE(run.old_left_processes);
}
