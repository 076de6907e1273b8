// The daemon's flags, and their validation into a DaemonConfig that can only
// hold checked values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tls.h"
#include "sharemgr/ganesha_config.h"
#include "sharemgr/serving_lease.h"
#include "sharemgr/share_service.h"
#include "sharemgr/volume.h"
#include "sharemgr/volume_owner.h"
#include "supervisor/supervisor.h"

namespace CLI {
class App;
}

namespace sharemgr {

// Raw flag values, as typed.
struct DaemonFlags {
  std::string volume;
  std::string export_dir;
  std::string nfs_address = "0.0.0.0";
  int64_t nfs_port = 2049;
  std::string listen = "0.0.0.0:9600";
  // Plaintext grpc.health.v1 only, for kubelet probes; "none" disables it.
  std::string health_listen = "0.0.0.0:9601";
  // Prometheus metrics over plain HTTP (GET /metrics only); empty: off.
  std::string metrics_listen;
  base::TlsFlags tls;
  std::string socket;
  std::string socket_group;
  std::string state_dir;
  int64_t grace_period = 90;
  int64_t lease_lifetime = 60;
  std::string probe_interval = "1s";
  int64_t probe_failures = 3;
  std::string start_timeout = "30s";
  std::string stop_timeout = "10s";
  std::string failed_linger = "5s";
  int64_t max_deaths = 5;
  std::string death_window = "10m";
  uint64_t epoch = 0;
  std::string pod_uid;
  std::vector<std::string> nfs_clients;
  std::string squash = "none";
  int64_t anon_uid = 65534;
  int64_t anon_gid = 65534;
  std::string ganesha_bin = "ganesha.nfsd";
  std::string plugins_dir = "/usr/lib/x86_64-linux-gnu/ganesha";
  // ganesha's memory: its caches and client tables (GaneshaLimits; 0 leaves
  // ganesha's own default), and a bound on its resident memory ("off" or a size).
  int64_t ganesha_cache_entries = 10'000;
  int64_t ganesha_dir_chunks = 100;
  int64_t ganesha_dir_chunk_entries = 32;
  int64_t ganesha_max_clients = 1'024;
  int64_t ganesha_max_connections = 1'024;
  std::string ganesha_memory_limit = "off";
  std::string ganesha_memory_grace = "10s";
  // Block-device volume (optional; without it the export directory is served as is).
  std::string device;
  std::string fs = "ext4";
  std::string device_timeout = "30s";
  bool format_if_blank = false;
  std::string fsck_mode = "preen";
  std::vector<std::string> mkfs_options;
  std::vector<std::string> mount_options;
  std::string volume_probe_interval = "1s";
  int64_t max_repairs = 3;
  std::string repair_window = "60m";
  // Longhorn's spelling: --data-engine v1|v2, --mount OPT (repeatable).
  std::string data_engine = "v1";
  std::vector<std::string> longhorn_mount_options;
  // Serve Longhorn's ShareManagerService too (it carries no epoch: unfenced).
  bool longhorn_compat = false;
  // With --epoch > 0, Longhorn's calls pass the fence at the server's own
  // epoch: refused unless this says it is meant.
  bool longhorn_compat_bypasses_epoch = false;
  // What callers may make the gRPC server spend.
  std::string max_volume_op_time = "10m";
  int64_t max_watch_streams = 64;
  int64_t max_changes = 8;
  // Not in --help: tests shorten it (see DaemonConfig::max_connection_age).
  std::string max_connection_age = "10m";
  // The serving lease in etcd (issue #12); empty: none. The others are
  // refused without --lease-etcd; empty means their default.
  std::string lease_etcd;          // HOST:PORT[,HOST:PORT...]
  std::string lease_prefix;        // /sharemgr
  std::string lease_ttl;           // 10s
  std::string lease_drift_margin;  // DefaultLeaseDriftMargin(TTL)
  // --lease-etcd-cert, -key, -ca, -dir, -server-name: etcd's mTLS (the
  // controller's --etcd-* under these names); none: plaintext.
  base::TlsFlags lease_etcd_tls;
};

void AddDaemonFlags(CLI::App& app, DaemonFlags& flags);

// Serve only while holding P/leases/<volume> in etcd under the epoch.
struct LeaseConfig {
  std::vector<std::string> endpoints;  // etcd members, HOST:PORT
  std::string prefix;                  // "" or "/P", no trailing slash
  std::string volume;
  std::string holder;  // written beside the epoch: this host's name (the pod's)
  // etcd's mTLS files, checked; nullopt: plaintext. Credentials are made from
  // them only when the client is (their file watcher is a thread).
  std::optional<base::TlsFiles> tls;
  std::string tls_server_name;  // empty: each endpoint's host
  ServingLeaseOptions options;
};

inline constexpr char kDefaultLeasePrefix[] = "/sharemgr";
inline constexpr base::Duration kDefaultLeaseTtl{10'000};

struct DaemonConfig {
  GaneshaConfig ganesha;
  std::string listen;
  std::string health_listen;   // empty: no health port
  std::string metrics_listen;  // empty: no metrics
  // --listen serves mutual TLS only with these; the unix socket stays plaintext.
  std::optional<base::TlsFiles> tls;
  std::vector<std::string> tls_allowed_clients;
  std::string socket;                 // unix socket path, or empty
  std::optional<gid_t> socket_group;  // the socket is 0660 with it, else 0600
  std::string state_dir;
  std::string config_path;
  std::string probe_host;  // where the NULL probe connects
  std::string pod_uid;     // empty: not given
  bool longhorn_compat = false;
  // A connection to --listen (or the socket) is ended after this long (gRPC
  // adds up to 10% jitter): it was admitted with the certificates of its
  // handshake, so a rotated CA reaches established connections only so.
  base::Duration max_connection_age{std::chrono::minutes(10)};
  ShareServiceLimits limits;  // also carries the epoch
  supervisor::SupervisorOptions supervisor;
  std::optional<VolumeConfig> volume;
  base::Duration volume_probe_interval{1000};
  VolumeOwnerOptions volume_owner;
  std::optional<LeaseConfig> lease;
  // Liveness fails once the supervisor loop (which wakes at least every
  // EventLoop::kHeartbeat) has been silent this long: it is stuck.
  base::Duration loop_stall_limit{3000};
};

absl::StatusOr<DaemonConfig> ResolveDaemonConfig(const DaemonFlags& flags);

}  // namespace sharemgr
