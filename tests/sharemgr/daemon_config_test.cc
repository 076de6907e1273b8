#include "sharemgr/daemon_config.h"

#include <doctest/doctest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "supervisor/event_loop.h"
#include "supervisor/restart_policy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace sharemgr {

TEST_CASE("defaults follow the volume name and are valid") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  const auto config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->state_dir == "/var/lib/share-manager/pvc-1");
  CHECK(config->ganesha.input().export_dir == "/export/pvc-1");
  CHECK(config->ganesha.input().recovery_root == "/var/lib/share-manager/pvc-1/recovery");
  CHECK(config->probe_host == "127.0.0.1");  // bound to 0.0.0.0: probe over loopback
  // Longhorn's layout: the volume's device, mounted at /export/<volume>.
  REQUIRE(config->volume.has_value());
  CHECK(config->volume->device == "/dev/longhorn/pvc-1");
  CHECK(config->volume->target == "/export/pvc-1");
  CHECK(config->volume->fs == FsType::kExt4);
  CHECK(config->supervisor.probe_interval == base::Duration(1000));
  CHECK(config->supervisor.probe_failures == 3);
  CHECK(config->supervisor.restart.max_deaths == 5);
  CHECK(config->supervisor.restart.death_window == std::chrono::minutes(10));
  const auto& cmd = config->supervisor.command;
  REQUIRE(cmd.size() >= 2);
  CHECK(cmd[0] == "ganesha.nfsd");
  CHECK(cmd[1] == "-F");
}

TEST_CASE(
    "Longhorn's defaults: gRPC on 0.0.0.0:9600, NFS on 0.0.0.0:2049, ext4 from "
    "/dev/longhorn/<volume> at /export/<volume>, data engine v1") {
  DaemonFlags flags;
  flags.volume = "pvc-lh";
  CHECK(flags.listen == "0.0.0.0:9600");
  CHECK(flags.nfs_address == "0.0.0.0");
  CHECK(flags.nfs_port == 2049);
  CHECK(flags.data_engine == "v1");
  const auto config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->listen == "0.0.0.0:9600");
  CHECK(config->ganesha.input().bind_address == "0.0.0.0");
  CHECK(config->ganesha.input().nfs_port == 2049);
  REQUIRE(config->volume.has_value());
  CHECK(config->volume->device == "/dev/longhorn/pvc-lh");
  CHECK(config->volume->target == "/export/pvc-lh");
  CHECK(config->volume->fs == FsType::kExt4);
}

// docs/DESIGN-NOTES.md "Restart policy", "Health model" and the flag table in
// docs/REFERENCE.md, as shipped: what the
// restart-policy and health-publisher tests (which pick their own options)
// never see. The policy's behaviour with these defaults: restart_policy_test.
TEST_CASE(
    "the shipped supervision settings are the README's: a 10 s stable run, backoff 100 ms "
    "doubling to 5 s, start 30 s, stop 10 s, linger 5 s, liveness after 3 s of loop silence") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  const auto config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  const auto& sup = config->supervisor;
  CHECK(sup.restart.stable_after == std::chrono::seconds(10));
  CHECK(sup.restart.initial_backoff == std::chrono::milliseconds(100));
  CHECK(sup.restart.max_backoff == std::chrono::seconds(5));
  CHECK(sup.start_timeout == std::chrono::seconds(30));
  CHECK(sup.stop_timeout == std::chrono::seconds(10));
  CHECK(sup.failed_linger == std::chrono::seconds(5));
  CHECK(config->loop_stall_limit == std::chrono::seconds(3));
  CHECK(supervisor::EventLoop::kHeartbeat == std::chrono::milliseconds(200));
  // The daemon's policy is the restart policy's defaults (tested there).
  const supervisor::RestartPolicyOptions defaults;
  CHECK(sup.restart.stable_after == defaults.stable_after);
  CHECK(sup.restart.initial_backoff == defaults.initial_backoff);
  CHECK(sup.restart.max_backoff == defaults.max_backoff);
}

TEST_CASE("bad flags are refused with a message naming the flag") {
  struct Case {
    void (*mutate)(DaemonFlags&);
    const char* flag;
  };
  const Case cases[] = {
      {[](DaemonFlags& f) { f.volume = "Bad_Name"; }, "--volume"},
      {[](DaemonFlags& f) { f.listen = "9600"; }, "--listen"},
      {[](DaemonFlags& f) { f.listen = "host.example:9600"; }, "--listen"},
      {[](DaemonFlags& f) { f.listen = "127.0.0.1:99999"; }, "--listen"},
      {[](DaemonFlags& f) { f.socket = "relative.sock"; }, "--socket"},
      {[](DaemonFlags& f) { f.state_dir = "/state/../etc"; }, "--state-dir"},
      {[](DaemonFlags& f) { f.probe_interval = "1h"; }, "--probe-interval"},
      {[](DaemonFlags& f) { f.probe_interval = "1ms"; }, "--probe-interval"},
      {[](DaemonFlags& f) { f.probe_failures = 0; }, "--probe-failures"},
      {[](DaemonFlags& f) { f.max_deaths = -1; }, "--max-deaths"},
      {[](DaemonFlags& f) { f.stop_timeout = "soon"; }, "--stop-timeout"},
      {[](DaemonFlags& f) { f.grace_period = 10; }, "--grace-period"},
      {[](DaemonFlags& f) { f.nfs_port = 70000; }, "--nfs-port"},
      {[](DaemonFlags& f) { f.pod_uid = "uid with spaces"; }, "--pod-uid"},
      {[](DaemonFlags& f) { f.metrics_listen = "9602"; }, "--metrics-listen"},
      {[](DaemonFlags& f) { f.metrics_listen = "metrics.example:9602"; }, "--metrics-listen"},
      {[](DaemonFlags& f) { f.metrics_listen = "127.0.0.1:0"; }, "--metrics-listen"},
      {[](DaemonFlags& f) { f.ganesha_memory_limit = "lots"; }, "--ganesha-memory-limit"},
      {[](DaemonFlags& f) { f.ganesha_memory_limit = "-1Gi"; }, "--ganesha-memory-limit"},
      {[](DaemonFlags& f) { f.ganesha_memory_grace = "forever"; }, "--ganesha-memory-grace"},
      {[](DaemonFlags& f) { f.ganesha_cache_entries = -1; }, "--ganesha-cache-entries"},
      {[](DaemonFlags& f) { f.ganesha_max_connections = 20'000; }, "--ganesha-max-connections"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.flag);
    DaemonFlags flags;
    flags.volume = "pvc-1";
    c.mutate(flags);
    const auto config = ResolveDaemonConfig(flags);
    REQUIRE_FALSE(config.ok());
    CHECK(std::string(config.status().message()).find(c.flag) != std::string::npos);
  }
}

TEST_CASE("the serving lease: off by default, and its defaults with --lease-etcd and --epoch") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  auto config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK_FALSE(config->lease.has_value());

  flags.lease_etcd = "127.0.0.1:23790,etcd-1.etcd:2379,[::1]:23791";
  flags.epoch = 3;
  config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  REQUIRE(config->lease.has_value());
  const auto& lease = *config->lease;
  CHECK(lease.endpoints ==
        std::vector<std::string>{"127.0.0.1:23790", "etcd-1.etcd:2379", "[::1]:23791"});
  CHECK(lease.prefix == "/sharemgr");
  CHECK(lease.volume == "pvc-1");
  CHECK_FALSE(lease.holder.empty());
  CHECK(lease.options.epoch == 3);
  CHECK(lease.options.ttl == std::chrono::seconds(10));
  CHECK(lease.options.drift_margin == std::chrono::milliseconds(500));
  // TTL + drift margin (an older holder gone) + --start-timeout (30 s).
  CHECK(lease.options.acquire_timeout == std::chrono::milliseconds(40'500));

  flags.lease_prefix = "/deploy-a/";
  flags.lease_ttl = "5m";
  config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->lease->prefix == "/deploy-a");
  CHECK(config->lease->options.ttl == std::chrono::minutes(5));
  CHECK(config->lease->options.drift_margin == std::chrono::seconds(6));  // TTL/50

  flags.lease_ttl = "2s";
  flags.lease_drift_margin = "0";
  config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->lease->options.ttl == std::chrono::seconds(2));
  CHECK(config->lease->options.drift_margin == base::Duration(0));
}

TEST_CASE("serving lease flags that cannot work are refused, naming the flag") {
  struct Case {
    void (*mutate)(DaemonFlags&);
    const char* message;
  };
  const Case cases[] = {
      {[](DaemonFlags& f) { f.epoch = 0; }, "--lease-etcd needs --epoch N > 0"},
      {[](DaemonFlags& f) { f.lease_etcd = "127.0.0.1"; }, "--lease-etcd '127.0.0.1' must be"},
      {[](DaemonFlags& f) { f.lease_etcd = "127.0.0.1:1,"; }, "--lease-etcd '127.0.0.1:1,'"},
      {[](DaemonFlags& f) { f.lease_etcd = "127.0.0.1:0"; }, "--lease-etcd '127.0.0.1:0'"},
      {[](DaemonFlags& f) { f.lease_etcd = "127.0.0.1:1/p"; }, "(the prefix is --lease-prefix)"},
      {[](DaemonFlags& f) { f.lease_ttl = "1s"; }, "--lease-ttl must be at least 2s"},
      {[](DaemonFlags& f) { f.lease_ttl = "301s"; }, "--lease-ttl must be whole seconds"},
      {[](DaemonFlags& f) { f.lease_ttl = "2.5s"; }, "--lease-ttl must be whole seconds"},
      {[](DaemonFlags& f) { f.lease_ttl = "often"; }, "--lease-ttl"},
      {[](DaemonFlags& f) { f.lease_drift_margin = "11s"; }, "--lease-drift-margin must not"},
      {[](DaemonFlags& f) { f.lease_prefix = "sharemgr"; }, "--lease-prefix 'sharemgr' must"},
      {[](DaemonFlags& f) { f.lease_prefix = "/a b"; }, "--lease-prefix"},
      {[](DaemonFlags& f) {
         f.lease_etcd.clear();
         f.lease_ttl = "10s";
       },
       "--lease-ttl needs --lease-etcd"},
      {[](DaemonFlags& f) {
         f.lease_etcd.clear();
         f.lease_prefix = "/p";
       },
       "--lease-prefix needs --lease-etcd"},
      {[](DaemonFlags& f) {
         f.lease_etcd.clear();
         f.lease_drift_margin = "1s";
       },
       "--lease-drift-margin needs --lease-etcd"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    DaemonFlags flags;
    flags.volume = "pvc-1";
    flags.epoch = 2;
    flags.lease_etcd = "127.0.0.1:23790";
    c.mutate(flags);
    const auto config = ResolveDaemonConfig(flags);
    REQUIRE_FALSE(config.ok());
    CHECK(std::string(config.status().message()).find(c.message) != std::string::npos);
  }
}

TEST_CASE("--lease-etcd-*: etcd's mTLS for the serving lease, refused without --lease-etcd") {
  testing_support::TempDir dir("lease-etcd-tls");
  const testing_support::TestCa ca(dir.path(), "etcd-ca");
  const auto cert = ca.Issue("pod", "share-manager", {"DNS:share-manager"});
  const auto secret = testing_support::WriteSecretDir(dir.path() + "/secret", cert);

  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  // CLI11 takes a vector of arguments last first.
  REQUIRE_NOTHROW(app.parse(std::vector<std::string>{
      "etcd", "--lease-etcd-server-name", cert.ca, "--lease-etcd-ca", cert.key, "--lease-etcd-key",
      cert.cert, "--lease-etcd-cert", "127.0.0.1:23790", "--lease-etcd", "2", "--epoch", "pvc-1",
      "--volume"}));
  auto config = ResolveDaemonConfig(flags);
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  REQUIRE(config->lease->tls.has_value());
  CHECK(config->lease->tls->cert == cert.cert);
  CHECK(config->lease->tls->key == cert.key);
  CHECK(config->lease->tls->ca == cert.ca);
  CHECK(config->lease->tls_server_name == "etcd");
  // The daemon's own --tls-* (its gRPC port) are another matter.
  CHECK_FALSE(config->tls.has_value());

  flags.lease_etcd_tls = {.dir = secret};
  config = ResolveDaemonConfig(flags);
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  CHECK(config->lease->tls->cert == secret + "/tls.crt");
  CHECK(config->lease->tls->ca == secret + "/ca.crt");
  CHECK(config->lease->tls_server_name.empty());  // each endpoint's host

  flags.lease_etcd_tls = {};
  config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK_FALSE(config->lease->tls.has_value());  // plaintext by default

  struct Case {
    base::TlsFlags tls;
    bool with_lease_etcd;
    std::string message;
  };
  const Case cases[] = {
      {{.cert = cert.cert}, false, "--lease-etcd-cert needs --lease-etcd"},
      {{.key = cert.key}, false, "--lease-etcd-key needs --lease-etcd"},
      {{.ca = cert.ca}, false, "--lease-etcd-ca needs --lease-etcd"},
      {{.dir = secret}, false, "--lease-etcd-dir needs --lease-etcd"},
      {{.server_name = "etcd"}, false, "--lease-etcd-server-name needs --lease-etcd"},
      {{.cert = cert.cert, .ca = cert.ca}, true, "missing --lease-etcd-key"},
      {{.cert = cert.cert, .dir = secret}, true, "--lease-etcd-dir replaces --lease-etcd-cert"},
      {{.cert = cert.cert, .key = cert.key, .ca = dir.path() + "/none"},
       true,
       "--lease-etcd-ca " + dir.path() + "/none"},
      {{.cert = cert.cert, .key = cert.cert, .ca = cert.ca}, true, "--lease-etcd-key"},
      {{.server_name = "etcd"}, true, "--lease-etcd-server-name needs TLS"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    DaemonFlags f;
    f.volume = "pvc-1";
    f.epoch = 2;
    if (c.with_lease_etcd) f.lease_etcd = "127.0.0.1:23790";
    f.lease_etcd_tls = c.tls;
    const auto refused = ResolveDaemonConfig(f);
    REQUIRE_FALSE(refused.ok());
    CHECK(std::string(refused.status().message()).find(c.message) != std::string::npos);
    CHECK(std::string(refused.status().message()).find("--tls-") == std::string::npos);
  }
}

// Longhorn's calls carry no epoch and pass at the server's own: beside a fence
// they bypass it, so adding --epoch to a Longhorn invocation must not do that
// silently.
TEST_CASE(
    "--longhorn-compat with --epoch > 0 is refused unless --longhorn-compat-bypasses-epoch "
    "accepts it") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  flags.longhorn_compat = true;
  flags.epoch = 3;
  auto config = ResolveDaemonConfig(flags);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().message() ==
        "--longhorn-compat with --epoch 3 serves Longhorn's calls, which carry no epoch, past the "
        "fence: drop one of them, or add --longhorn-compat-bypasses-epoch to accept that");

  flags.longhorn_compat_bypasses_epoch = true;
  config = ResolveDaemonConfig(flags);
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  CHECK(config->longhorn_compat);
  CHECK(config->limits.epoch == 3);

  flags.epoch = 0;  // unfenced: nothing to bypass, nothing to accept
  flags.longhorn_compat_bypasses_epoch = false;
  CHECK(ResolveDaemonConfig(flags).ok());

  // The acknowledgement alone is a half configuration.
  flags.longhorn_compat = false;
  flags.longhorn_compat_bypasses_epoch = true;
  config = ResolveDaemonConfig(flags);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().message() == "--longhorn-compat-bypasses-epoch needs --longhorn-compat");
}

TEST_CASE(
    "a count flag just outside its range is refused, naming the range, and its ends are taken") {
  struct Case {
    int64_t DaemonFlags::*flag;
    const char* name;
    int64_t min, max;
    const char* refused;
  };
  const Case cases[] = {
      {&DaemonFlags::probe_failures, "--probe-failures", 1, 100,
       "--probe-failures must be between 1 and 100"},
      {&DaemonFlags::max_deaths, "--max-deaths", 0, 1000,
       "--max-deaths must be between 0 and 1000"},
      {&DaemonFlags::max_repairs, "--max-repairs", 0, 1000,
       "--max-repairs must be between 0 and 1000"},
      {&DaemonFlags::max_watch_streams, "--max-watch-streams", 1, 10'000,
       "--max-watch-streams must be between 1 and 10000"},
      {&DaemonFlags::max_changes, "--max-changes", 1, 1000,
       "--max-changes must be between 1 and 1000"},
  };
  for (const auto& c : cases) {
    for (const int64_t value : {c.min - 1, c.min, c.max, c.max + 1}) {
      CAPTURE(c.name);
      CAPTURE(value);
      DaemonFlags flags;
      flags.volume = "pvc-1";
      flags.*c.flag = value;
      const auto config = ResolveDaemonConfig(flags);
      if (value < c.min || value > c.max) {
        REQUIRE_FALSE(config.ok());
        CHECK(config.status().message() == c.refused);
      } else {
        CHECK(config.ok());
      }
    }
  }
}

TEST_CASE(
    "--max-volume-op-time: 10 minutes by default, bounding both the handler's wait (the service's "
    "limits) and a trim's work (the volume owner's), down to 1 s") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  for (const auto& [flag, want] :
       {std::pair<std::string, base::Duration>{"", std::chrono::minutes(10)},
        {"90s", std::chrono::seconds(90)}}) {
    if (!flag.empty()) flags.max_volume_op_time = flag;
    const auto config = ResolveDaemonConfig(flags);
    REQUIRE(config.ok());
    CHECK(config->limits.max_volume_op_time == want);
    CHECK(config->volume_owner.max_op_time == want);
  }
  flags.max_volume_op_time = "500ms";
  CHECK(ResolveDaemonConfig(flags).status().message() ==
        "--max-volume-op-time must be at least 1s");
}

TEST_CASE(
    "connections to the API port end after 10 minutes, --max-connection-age (kept out of --help) "
    "changes it, down to 1 s") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  auto config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->max_connection_age == std::chrono::minutes(10));
  CLI::App app;
  AddDaemonFlags(app, flags);
  // CLI11 takes a vector of arguments last first.
  REQUIRE_NOTHROW(
      app.parse(std::vector<std::string>{"2s", "--max-connection-age", "pvc-1", "--volume"}));
  config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->max_connection_age == base::Duration(2000));
  CHECK(app.help().find("--max-connection-age") == std::string::npos);
  flags.max_connection_age = "500ms";
  config = ResolveDaemonConfig(flags);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().message() == "--max-connection-age must be at least 1s");
}

TEST_CASE(
    "--format-if-blank with --export-dir and no --device is refused, naming the flags that need "
    "--device") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  flags.export_dir = "/export/pvc-1";
  flags.format_if_blank = true;
  const auto config = ResolveDaemonConfig(flags);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().message() ==
        "--format-if-blank, --mkfs-option and --mount-option need --device");
}

TEST_CASE(
    "--export-dir without --device exports a directory, Longhorn's --mount adds mount options") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  flags.export_dir = "/srv/share";
  auto config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK_FALSE(config->volume.has_value());
  flags.export_dir.clear();
  flags.longhorn_mount_options = {"noatime"};
  flags.mount_options = {"discard"};
  config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->volume->mount_options == std::vector<std::string>{"discard", "noatime"});
  flags.longhorn_mount_options = {"a,b"};
  CHECK_FALSE(ResolveDaemonConfig(flags).ok());
}

TEST_CASE("metrics are off by default, and --metrics-listen is kept as given") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  CHECK(ResolveDaemonConfig(flags)->metrics_listen.empty());
  flags.metrics_listen = "[::1]:9602";
  CHECK(ResolveDaemonConfig(flags)->metrics_listen == "[::1]:9602");
}

TEST_CASE(
    "ganesha's memory: caches bounded by default (10000 files, 100 directory chunks of 32, 1024 "
    "clients and connections), no RSS limit, and a limit holds for the grace in probe intervals") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  auto config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  const auto& limits = config->ganesha.input().limits;
  CHECK(limits.cache_entries == 10'000);
  CHECK(limits.dir_chunks == 100);
  CHECK(limits.dir_chunk_entries == 32);
  CHECK(limits.max_clients == 1'024);
  CHECK(limits.max_connections == 1'024);
  CHECK(config->supervisor.memory_limit_bytes == 0);

  CLI::App app;
  AddDaemonFlags(app, flags);
  // CLI11 takes a vector of arguments last first.
  REQUIRE_NOTHROW(app.parse(
      std::vector<std::string>{"2.5s", "--ganesha-memory-grace", "512Mi", "--ganesha-memory-limit",
                               "0", "--ganesha-cache-entries", "pvc-1", "--volume"}));
  config = ResolveDaemonConfig(flags);
  REQUIRE(config.ok());
  CHECK(config->ganesha.input().limits.cache_entries == 0);  // ganesha's own default
  CHECK(config->supervisor.memory_limit_bytes == 512ull << 20);
  // The first sample over the limit, then 2.5 s at 1 s: three more.
  CHECK(config->supervisor.memory_limit_samples == 4);
  flags.probe_interval = "250ms";
  CHECK(ResolveDaemonConfig(flags)->supervisor.memory_limit_samples == 11);
  flags.ganesha_memory_grace = "0s";
  CHECK(ResolveDaemonConfig(flags)->supervisor.memory_limit_samples == 1);
  flags.ganesha_memory_limit = "off";
  CHECK(ResolveDaemonConfig(flags)->supervisor.memory_limit_bytes == 0);
}

TEST_CASE("[v6]:port and :port listen addresses are accepted") {
  for (const char* listen : {"[::1]:9600", ":9600", "localhost:9600", "0.0.0.0:1"}) {
    CAPTURE(listen);
    DaemonFlags flags;
    flags.volume = "pvc-1";
    flags.listen = listen;
    CHECK(ResolveDaemonConfig(flags).ok());
  }
}

}  // namespace sharemgr
