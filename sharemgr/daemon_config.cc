#include "sharemgr/daemon_config.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/byte_size.h"
#include "base/validate.h"
#include "etcd/client.h"
#include "etcd/lease_validity.h"
#include "sharemgr/unix_socket.h"

namespace sharemgr {
namespace {

using base::Duration;
using base::ParseFlagDuration;

// A count flag's value, between `min` and `max` inclusive.
absl::Status FlagWithin(absl::string_view flag, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " must be between ", min, " and ", max));
}

using base::ValidateListen;

constexpr char kLeaseTlsPrefix[] = "--lease-etcd-";

// --lease-*: the serving lease, or nullopt without --lease-etcd.
absl::StatusOr<std::optional<LeaseConfig>> ResolveLease(const DaemonFlags& f,
                                                        Duration start_timeout) {
  if (f.lease_etcd.empty()) {
    for (const auto& [flag, value] :
         {std::pair{"--lease-prefix", &f.lease_prefix}, std::pair{"--lease-ttl", &f.lease_ttl},
          std::pair{"--lease-drift-margin", &f.lease_drift_margin}}) {
      if (!value->empty())
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs --lease-etcd"));
    }
    if (const auto tls = base::ClientTlsArgsAs(f.lease_etcd_tls, kLeaseTlsPrefix); !tls.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(tls.front(), " needs --lease-etcd"));
    }
    return std::nullopt;
  }
  if (f.epoch == 0) {
    return absl::InvalidArgumentError(
        "--lease-etcd needs --epoch N > 0: the lease is taken under that epoch, and a newer one "
        "takes it over");
  }
  LeaseConfig lease{.volume = f.volume};
  // The etcd client's own check of its members, as the controller's --store takes them.
  auto url = etcd::ParseEtcdUrl(absl::StrCat("etcd://", f.lease_etcd));
  if (!url.ok() || !url->prefix.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lease-etcd '", f.lease_etcd,
                     "' must be HOST:PORT[,HOST:PORT...] (the prefix is "
                     "--lease-prefix)",
                     url.ok() ? "" : ": ", url.ok() ? "" : url.status().message()));
  }
  lease.endpoints = std::move(url->endpoints);
  auto tls = base::ResolveTlsFiles(f.lease_etcd_tls, kLeaseTlsPrefix);
  if (!tls.ok()) return tls.status();
  lease.tls = *std::move(tls);
  lease.tls_server_name = f.lease_etcd_tls.server_name;
  lease.prefix = f.lease_prefix.empty() ? kDefaultLeasePrefix : f.lease_prefix;
  if (auto s = base::ValidateOption("--lease-prefix", lease.prefix, " "); !s.ok()) return s;
  if (lease.prefix.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--lease-prefix '", lease.prefix, "' must start with '/'"));
  }
  while (!lease.prefix.empty() && lease.prefix.back() == '/') lease.prefix.pop_back();

  Duration ttl = kDefaultLeaseTtl;
  if (!f.lease_ttl.empty()) {
    auto parsed = ParseFlagDuration("--lease-ttl", f.lease_ttl, etcd::kMinLeaseTtl);
    if (!parsed.ok()) return parsed.status();
    ttl = *parsed;
  }
  if (auto s = etcd::ValidateLeaseTtl("--lease-ttl", ttl); !s.ok()) return s;
  Duration drift = DefaultLeaseDriftMargin(ttl);
  if (!f.lease_drift_margin.empty()) {
    auto parsed = ParseFlagDuration("--lease-drift-margin", f.lease_drift_margin);
    if (!parsed.ok()) return parsed.status();
    if (*parsed > ttl) {
      return absl::InvalidArgumentError("--lease-drift-margin must not exceed --lease-ttl");
    }
    drift = *parsed;
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    return absl::InternalError("cannot read this host's name for the lease holder");
  }
  lease.holder = host;
  lease.options = ServingLeaseOptions{
      .epoch = f.epoch,
      .ttl = ttl,
      .drift_margin = drift,
      // An older holder that died is gone within its TTL (plus the margin);
      // then the start itself.
      .acquire_timeout = ttl + drift + start_timeout,
  };
  return lease;
}

std::string ProbeHost(const std::string& bind) {
  if (bind == "0.0.0.0") return "127.0.0.1";
  if (bind == "::") return "::1";
  return bind;
}

}  // namespace

void AddDaemonFlags(CLI::App& app, DaemonFlags& f) {
  // A flag given twice takes the last value, so wrappers can override defaults.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--volume", f.volume, "Volume name (a Kubernetes DNS-1123 label)")->required();
  app.add_option("--export-dir", f.export_dir,
                 "Directory to export; created when missing (default /export/<volume>)");
  app.add_option("--nfs-address", f.nfs_address, "Address ganesha binds NFS to")
      ->capture_default_str();
  app.add_option("--nfs-port", f.nfs_port, "NFS port")->capture_default_str();
  app.add_option("--listen", f.listen, "gRPC listen address HOST:PORT")->capture_default_str();
  app.add_option("--health-listen", f.health_listen,
                 "Plaintext address serving only grpc.health.v1 (kubelet gRPC probes), or none")
      ->capture_default_str();
  app.add_option("--metrics-listen", f.metrics_listen,
                 "Serve Prometheus metrics over plain HTTP at HOST:PORT/metrics (default: off)");
  base::AddTlsFlags(app, f.tls, base::TlsRole::kServer);
  app.add_option("--socket", f.socket,
                 "Also serve gRPC on this unix socket path (mode 0600; its directory must not "
                 "be world-writable)");
  app.add_option("--socket-group", f.socket_group,
                 "Group (name or gid) that may also use --socket (mode 0660)");
  app.add_option("--state-dir", f.state_dir,
                 "ganesha.conf, log, pid file and NFS recovery state "
                 "(default /var/lib/share-manager/<volume>; keep it across restarts)");
  app.add_option("--grace-period", f.grace_period, "NFSv4 grace period, seconds (>= lease)")
      ->capture_default_str();
  app.add_option("--lease-lifetime", f.lease_lifetime, "NFSv4 lease lifetime, seconds")
      ->capture_default_str();
  app.add_option("--probe-interval", f.probe_interval,
                 "NFS NULL probe period; also each probe's timeout")
      ->capture_default_str();
  app.add_option("--probe-failures", f.probe_failures,
                 "Missed probes in a row that mean ganesha is hung (then SIGKILL + restart)")
      ->capture_default_str();
  app.add_option("--start-timeout", f.start_timeout,
                 "How long a new ganesha may take to answer its first probe")
      ->capture_default_str();
  app.add_option("--stop-timeout", f.stop_timeout, "SIGTERM to SIGKILL delay when stopping")
      ->capture_default_str();
  app.add_option("--failed-linger", f.failed_linger,
                 "How long the FAILED status stays readable before exiting with code 3")
      ->capture_default_str();
  app.add_option("--max-deaths", f.max_deaths,
                 "ganesha deaths tolerated within --death-window; one more is FAILED")
      ->capture_default_str();
  app.add_option("--death-window", f.death_window, "Window for --max-deaths")
      ->capture_default_str();
  app.add_option("--epoch", f.epoch,
                 "Fencing epoch: every mutating call must carry exactly this epoch (0: "
                 "unfenced; calls carry none, and one carrying an epoch is refused)")
      ->capture_default_str();
  app.add_flag("--longhorn-compat", f.longhorn_compat,
               "Also serve Longhorn's ShareManagerService; its calls carry no epoch and are "
               "NOT fenced (with --epoch > 0 only beside --longhorn-compat-bypasses-epoch)");
  app.add_flag("--longhorn-compat-bypasses-epoch", f.longhorn_compat_bypasses_epoch,
               "Accept that with --longhorn-compat and --epoch > 0, Longhorn's calls get past "
               "the fence (without it that combination is refused)");
  app.add_option(
         "--max-volume-op-time", f.max_volume_op_time,
         "Server-side bound on a trim (its work stops between two ranges of whole allocation "
         "groups, about 1 GiB) and on the "
         "wait for a resize (whose helper is bounded by its own 300 s timeout), whatever "
         "the caller's deadline")
      ->capture_default_str();
  app.add_option("--max-watch-streams", f.max_watch_streams,
                 "WatchStatus streams open at once; more are refused (RESOURCE_EXHAUSTED)")
      ->capture_default_str();
  app.add_option("--max-changes", f.max_changes,
                 "Mutating calls (mount, unmount, trim, resize) in progress at once; more are "
                 "refused (RESOURCE_EXHAUSTED)")
      ->capture_default_str();
  app.add_option("--max-connection-age", f.max_connection_age,
                 "How long a gRPC connection may live before the server ends it")
      ->group("");  // hidden: for tests; docs/OPERATE.md "Security" says why it is there
  app.add_option("--lease-etcd", f.lease_etcd,
                 "Serve only while holding this volume's serving lease in etcd (members "
                 "HOST:PORT[,HOST:PORT...]), taken under --epoch before anything is served; "
                 "when it cannot be renewed in time, ganesha is killed and share-manager exits 6");
  app.add_option("--lease-prefix", f.lease_prefix,
                 "Key prefix P of the lease in etcd: P/leases/<volume>, P/epochs/<volume> "
                 "(default /sharemgr)");
  app.add_option("--lease-ttl", f.lease_ttl,
                 "The lease's TTL, whole seconds from 2s to 5m; renewed every TTL/3, and "
                 "serving stops max(500ms, TTL/5) before it could expire (default 10s)");
  app.add_option("--lease-drift-margin", f.lease_drift_margin,
                 "How long to wait after an older holder's lease is gone before taking it "
                 "(default max(500ms, TTL/50))");
  base::AddClientTlsFlagsAs(app, f.lease_etcd_tls, kLeaseTlsPrefix, "etcd");
  app.add_option("--pod-uid", f.pod_uid,
                 "Instance id reported in the status (e.g. the Kubernetes pod UID), so a "
                 "controller can tell this share-manager from another on the same address");
  app.add_option("--nfs-clients", f.nfs_clients,
                 "Who may use the export: an IP address, a CIDR network or a host name "
                 "(repeatable; default: every client)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--squash", f.squash,
                 "Map root (root), every user (all) or nobody (none) to --anon-uid/--anon-gid")
      ->check(CLI::IsMember({"none", "root", "all"}))
      ->capture_default_str();
  app.add_option("--anon-uid", f.anon_uid, "uid squashed callers get")->capture_default_str();
  app.add_option("--anon-gid", f.anon_gid, "gid squashed callers get")->capture_default_str();
  app.add_option("--ganesha-bin", f.ganesha_bin, "ganesha executable")->capture_default_str();
  app.add_option("--ganesha-plugins-dir", f.plugins_dir, "ganesha FSAL plugin directory")
      ->capture_default_str();
  app.add_option("--ganesha-cache-entries", f.ganesha_cache_entries,
                 "Files ganesha keeps cached (MDCACHE Entries_HWMark, ~1.7 KiB each); 0: "
                 "ganesha's default of 100000")
      ->capture_default_str();
  app.add_option("--ganesha-dir-chunks", f.ganesha_dir_chunks,
                 "Directory chunks ganesha keeps cached (MDCACHE Chunks_HWMark); 0: ganesha's "
                 "default of 100000")
      ->capture_default_str();
  app.add_option("--ganesha-dir-chunk-entries", f.ganesha_dir_chunk_entries,
                 "Entries of a directory chunk, and names a cached directory keeps from lookups "
                 "(MDCACHE Dir_Chunk); 0: ganesha's default of 128")
      ->capture_default_str();
  app.add_option("--ganesha-max-clients", f.ganesha_max_clients,
                 "NFSv4 clients ganesha keeps state for (Max_Client_Ids); 0: unlimited")
      ->capture_default_str();
  app.add_option("--ganesha-max-connections", f.ganesha_max_connections,
                 "TCP connections ganesha accepts (RPC_Max_Connections, at most 10000); 0: "
                 "ganesha's default of 1024")
      ->capture_default_str();
  app.add_option("--ganesha-memory-limit", f.ganesha_memory_limit,
                 "Restart ganesha in place (as for a hang, counted against --max-deaths) when its "
                 "resident memory stays over this size for --ganesha-memory-grace: e.g. 512Mi, "
                 "1Gi; off: no limit")
      ->capture_default_str();
  app.add_option("--ganesha-memory-grace", f.ganesha_memory_grace,
                 "How long ganesha's memory may stay over --ganesha-memory-limit (sampled every "
                 "--probe-interval)")
      ->capture_default_str();
  app.add_option("--device", f.device,
                 "Block device to check, mount at --export-dir and export. Default: "
                 "/dev/longhorn/<volume>, unless --export-dir is given, which then is "
                 "exported as the directory it is");
  app.add_option("--fs", f.fs, "Filesystem expected on --device")
      ->check(CLI::IsMember({"ext4", "xfs"}))
      ->capture_default_str();
  app.add_option("--device-timeout", f.device_timeout, "How long to wait for --device to appear")
      ->capture_default_str();
  app.add_flag("--format-if-blank", f.format_if_blank,
               "Format --device with --fs when it holds no filesystem (never otherwise)");
  app.add_option("--fsck-mode", f.fsck_mode,
                 "How far an unattended e2fsck may go: preen (-p, only what is safe) or yes (-y, "
                 "answers yes to every repair)")
      ->capture_default_str();
  app.add_option("--mkfs-option", f.mkfs_options, "Extra mkfs argument (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--mount-option", f.mount_options, "Mount option for --device (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--data-engine", f.data_engine, "Longhorn data engine of the volume")
      ->check(CLI::IsMember({"v1", "v2"}))
      ->capture_default_str();
  app.add_option("--mount", f.longhorn_mount_options,
                 "Longhorn's name for --mount-option (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--volume-probe-interval", f.volume_probe_interval,
                 "How often the mounted volume is probed (mount options and an I/O check)")
      ->capture_default_str();
  app.add_option("--max-repairs", f.max_repairs,
                 "Full repairs (unmount, check, mount) allowed within --repair-window; one "
                 "more fails the share (exit 5) instead of checking a failing device for ever")
      ->capture_default_str();
  app.add_option("--repair-window", f.repair_window, "Window for --max-repairs")
      ->capture_default_str();
}

absl::StatusOr<DaemonConfig> ResolveDaemonConfig(const DaemonFlags& f) {
  if (auto s = base::ValidateVolumeName(f.volume); !s.ok()) return s;
  if (!f.pod_uid.empty()) {
    if (auto s = base::ValidatePodUid(f.pod_uid); !s.ok()) return s;
  }
  // Paths are used in the one spelling the kernel reports (mountinfo), so
  // "/x/export/" or a symlinked component still matches the mount target.
  auto state_dir = base::NormalizePath(
      "--state-dir",
      f.state_dir.empty() ? absl::StrCat("/var/lib/share-manager/", f.volume) : f.state_dir, true);
  if (!state_dir.ok()) return state_dir.status();
  auto export_dir = base::NormalizePath(
      "--export-dir", f.export_dir.empty() ? absl::StrCat("/export/", f.volume) : f.export_dir,
      true);
  if (!export_dir.ok()) return export_dir.status();
  if (auto s = ValidateListen("--listen", f.listen); !s.ok()) return s;
  std::string health_listen;
  if (f.health_listen != "none") {
    if (auto s = ValidateListen("--health-listen", f.health_listen); !s.ok()) return s;
    health_listen = f.health_listen;
  }
  if (!f.metrics_listen.empty()) {
    if (auto s = ValidateListen("--metrics-listen", f.metrics_listen); !s.ok()) return s;
  }
  auto tls = base::ResolveTlsFiles(f.tls);
  if (!tls.ok()) return tls.status();
  // A CA signs many certificates: accepting any of them must be a decision
  // written down, not the default.
  if (*tls && f.tls.allowed_clients.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs --tls-allowed-client NAME (repeatable): the client certificates' DNS SAN "
        "or CN that may call");
  }
  for (const auto& name : f.tls.allowed_clients) {
    if (auto s = base::ValidateOption("--tls-allowed-client", name, " "); !s.ok()) return s;
  }
  std::string socket;
  if (!f.socket.empty()) {
    auto normal = base::NormalizePath("--socket", f.socket, true);
    if (!normal.ok()) return normal.status();
    socket = *normal;
  }
  std::optional<gid_t> socket_group;
  if (!f.socket_group.empty()) {
    if (socket.empty()) return absl::InvalidArgumentError("--socket-group needs --socket");
    auto gid = ResolveSocketGroup(f.socket_group);
    if (!gid.ok()) return gid.status();
    socket_group = *gid;
  }
  // Longhorn's calls carry no epoch and are served at the server's own, so
  // beside a fence they walk past it: that must be written down, never a
  // side effect of adding --epoch to a Longhorn invocation.
  if (f.longhorn_compat && f.epoch > 0 && !f.longhorn_compat_bypasses_epoch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--longhorn-compat with --epoch ", f.epoch,
        " serves Longhorn's calls, which carry no epoch, past the fence: drop one of them, or add "
        "--longhorn-compat-bypasses-epoch to accept that"));
  }
  if (f.longhorn_compat_bypasses_epoch && !f.longhorn_compat) {
    return absl::InvalidArgumentError("--longhorn-compat-bypasses-epoch needs --longhorn-compat");
  }
  if (auto s = FlagWithin("--probe-failures", f.probe_failures, 1, 100); !s.ok()) return s;
  if (auto s = FlagWithin("--max-deaths", f.max_deaths, 0, 1000); !s.ok()) return s;
  if (auto s = FlagWithin("--max-repairs", f.max_repairs, 0, 1000); !s.ok()) return s;
  if (f.ganesha_bin.empty()) return absl::InvalidArgumentError("--ganesha-bin is empty");
  if (auto s = FlagWithin("--max-watch-streams", f.max_watch_streams, 1, 10'000); !s.ok()) return s;
  if (auto s = FlagWithin("--max-changes", f.max_changes, 1, 1000); !s.ok()) return s;
  auto max_volume_op_time =
      ParseFlagDuration("--max-volume-op-time", f.max_volume_op_time, Duration(1000));
  if (!max_volume_op_time.ok()) return max_volume_op_time.status();
  auto max_connection_age =
      ParseFlagDuration("--max-connection-age", f.max_connection_age, Duration(1000));
  if (!max_connection_age.ok()) return max_connection_age.status();

  auto ganesha = GaneshaConfig::Create({
      .volume = f.volume,
      .export_dir = *export_dir,
      .bind_address = f.nfs_address,
      .nfs_port = f.nfs_port,
      .grace_seconds = f.grace_period,
      .lease_seconds = f.lease_lifetime,
      .recovery_root = absl::StrCat(*state_dir, "/recovery"),
      .plugins_dir = f.plugins_dir,
      .clients = f.nfs_clients,
      .probe_client = ProbeHost(f.nfs_address),
      .squash = f.squash == "root"  ? Squash::kRoot
                : f.squash == "all" ? Squash::kAll
                                    : Squash::kNone,
      .anon_uid = f.anon_uid,
      .anon_gid = f.anon_gid,
      .limits = {.cache_entries = f.ganesha_cache_entries,
                 .dir_chunks = f.ganesha_dir_chunks,
                 .dir_chunk_entries = f.ganesha_dir_chunk_entries,
                 .max_clients = f.ganesha_max_clients,
                 .max_connections = f.ganesha_max_connections},
  });
  if (!ganesha.ok()) return ganesha.status();

  supervisor::SupervisorOptions sup;
  auto probe_interval = ParseFlagDuration("--probe-interval", f.probe_interval, Duration(50));
  auto start_timeout = ParseFlagDuration("--start-timeout", f.start_timeout, Duration(100));
  auto stop_timeout = ParseFlagDuration("--stop-timeout", f.stop_timeout);
  auto failed_linger = ParseFlagDuration("--failed-linger", f.failed_linger);
  auto death_window = ParseFlagDuration("--death-window", f.death_window, Duration(1000));
  auto repair_window = ParseFlagDuration("--repair-window", f.repair_window, Duration(1000));
  auto memory_grace = ParseFlagDuration("--ganesha-memory-grace", f.ganesha_memory_grace);
  for (const auto* d : {&probe_interval, &start_timeout, &stop_timeout, &failed_linger,
                        &death_window, &repair_window, &memory_grace}) {
    if (!d->ok()) return d->status();
  }
  if (f.ganesha_memory_limit != "off") {
    auto limit = base::ParseByteSize(f.ganesha_memory_limit);
    if (!limit.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ganesha-memory-limit: ", limit.status().message(), " or off"));
    }
    sup.memory_limit_bytes = *limit;
  }
  // One sample per probe interval: the first one over the limit, and the
  // grace's worth after it (rounded up), all over it.
  sup.memory_limit_samples = static_cast<int>(
      1 + (memory_grace->count() + probe_interval->count() - 1) / probe_interval->count());
  sup.probe_interval = *probe_interval;
  sup.start_timeout = *start_timeout;
  sup.stop_timeout = *stop_timeout;
  sup.failed_linger = *failed_linger;
  sup.probe_failures = static_cast<int>(f.probe_failures);
  sup.restart.max_deaths = static_cast<int>(f.max_deaths);
  sup.restart.death_window = *death_window;
  const std::string config_path = absl::StrCat(*state_dir, "/ganesha.conf");
  sup.log_file = absl::StrCat(*state_dir, "/ganesha.log");
  sup.command = {f.ganesha_bin, "-F",         "-f", config_path,
                 "-L",          sup.log_file, "-p", absl::StrCat(*state_dir, "/ganesha.pid"),
                 "-N",          "NIV_EVENT"};

  auto lease = ResolveLease(f, sup.start_timeout);
  if (!lease.ok()) return lease.status();

  if (f.fsck_mode != "preen" && f.fsck_mode != "yes") {
    return absl::InvalidArgumentError(
        absl::StrCat("--fsck-mode must be preen or yes, not '", f.fsck_mode, "'"));
  }
  std::optional<VolumeConfig> volume;
  auto volume_probe =
      ParseFlagDuration("--volume-probe-interval", f.volume_probe_interval, Duration(50));
  if (!volume_probe.ok()) return volume_probe.status();
  // Longhorn's layout when nothing says otherwise: the volume's block device,
  // mounted at /export/<volume>.
  const std::string device = !f.device.empty() || !f.export_dir.empty()
                                 ? f.device
                                 : absl::StrCat("/dev/longhorn/", f.volume);
  std::vector<std::string> mount_options = f.mount_options;
  mount_options.insert(mount_options.end(), f.longhorn_mount_options.begin(),
                       f.longhorn_mount_options.end());
  if (!device.empty()) {
    // Not resolved: the device may appear later, and a by-id link is the point.
    auto normal_device = base::NormalizePath("--device", device, false);
    if (!normal_device.ok()) return normal_device.status();
    auto device_timeout = ParseFlagDuration("--device-timeout", f.device_timeout);
    if (!device_timeout.ok()) return device_timeout.status();
    for (const auto& o : mount_options) {
      if (auto s = base::ValidateOption("--mount-option", o, ","); !s.ok()) return s;
    }
    for (const auto& o : f.mkfs_options) {
      if (auto s = base::ValidateOption("--mkfs-option", o, ""); !s.ok()) return s;
    }
    volume = VolumeConfig{.device = *normal_device,
                          .fs = f.fs == "xfs" ? FsType::kXfs : FsType::kExt4,
                          .target = ganesha->input().export_dir,
                          .device_timeout = *device_timeout,
                          .format_if_blank = f.format_if_blank,
                          .fsck_mode = f.fsck_mode == "yes" ? FsckMode::kYes : FsckMode::kPreen,
                          .mkfs_options = f.mkfs_options,
                          .mount_options = mount_options};
  } else if (f.format_if_blank || !f.mkfs_options.empty() || !mount_options.empty()) {
    return absl::InvalidArgumentError(
        "--format-if-blank, --mkfs-option and --mount-option need --device");
  }

  return DaemonConfig{
      .ganesha = *std::move(ganesha),
      .listen = f.listen,
      .health_listen = health_listen,
      .metrics_listen = f.metrics_listen,
      .tls = *tls,
      .tls_allowed_clients = f.tls.allowed_clients,
      .socket = socket,
      .socket_group = socket_group,
      .state_dir = *state_dir,
      .config_path = config_path,
      .probe_host = ProbeHost(f.nfs_address),
      .pod_uid = f.pod_uid,
      .longhorn_compat = f.longhorn_compat,
      .max_connection_age = *max_connection_age,
      .limits = {.epoch = f.epoch,
                 .max_volume_op_time = *max_volume_op_time,
                 .max_watch_streams = static_cast<int>(f.max_watch_streams),
                 .max_changes = static_cast<int>(f.max_changes)},
      .supervisor = std::move(sup),
      .volume = std::move(volume),
      .volume_probe_interval = *volume_probe,
      .volume_owner = {.max_full_repairs = static_cast<int>(f.max_repairs),
                       .repair_window = *repair_window,
                       .max_op_time = *max_volume_op_time},
      .lease = *std::move(lease),
  };
}

}  // namespace sharemgr
