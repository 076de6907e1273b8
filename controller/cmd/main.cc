// share-controller: runs the controller on one machine with a MemoryStore
// (optionally persisted) or an EtcdStore, and LocalPodRuntime, for shares
// given by flags or a file, and prints each share's phase as it changes. One
// share-controller per store file and per work dir: each is flocked for the
// process's lifetime. With --store etcd:// it is one replica of a highly
// available deployment (controller/ha/ha_replica.h): it acts only while it
// leads, and replicas share the work dir.
//
// Exit codes: 0 stopped by SIGINT/SIGTERM; 1 failed to start or run, or
// another share-controller holds the store file or the work dir, or etcd
// cannot be reached; 2 bad flags, or a file they name cannot be used (an
// unreadable store is never started empty); 3 (kExitNotLeader) lost the
// leadership (--store etcd://, or the Lease with --kubernetes): stopped acting
// at once, every pod left running.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <iostream>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/file_lock.h"
#include "base/files.h"
#include "base/fmt_absl.h"
#include "base/json_log.h"
#include "base/loopback_port.h"
#include "base/tls.h"
#include "base/tls13_only.h"
#include "base/validate.h"
#include "controller/cmd/controller_metrics.h"
#include "controller/cmd/kubernetes_mode.h"
#include "controller/core/controller.h"
#include "controller/ha/ha_replica.h"
#include "controller/runtime/grpc_share_connector.h"
#include "controller/runtime/local/local_pod_runtime.h"
#include "controller/store/etcd_store.h"
#include "controller/store/memory_store.h"
#include "metrics/endpoint.h"

namespace {

namespace v1 = sharemanager::controller::v1;

std::string SiblingBinary(const char* argv0, const std::string& name) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  std::string path(self, static_cast<size_t>(n));
  const auto slash = path.rfind('/');
  // build/controller/share-controller -> build/sharemgr/share-manager
  const std::string dir = path.substr(0, slash);
  for (const std::string& candidate : {dir + "/" + name, dir + "/../sharemgr/" + name}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  (void)argv0;
  return name;
}

int64_t ParseMs(const std::string& flag, const std::string& text) {
  auto d = base::ParseFlagDuration(flag, text);
  if (!d.ok()) {
    std::cerr << "share-controller: " << d.status().message() << "\n";
    std::exit(2);
  }
  return d->count();
}

}  // namespace

int main(int argc, char** argv) {
  // First, while no thread exists: OpenSSL's configuration is swapped in place.
  base::OfferOnlyTls13();
  CLI::App app{
      "share-controller keeps each share served: one active share-manager pod per volume\n"
      "(fenced by epochs), replaced when it dies or hangs, remounted once per read-only\n"
      "event. Pods are Kubernetes pods (--kubernetes: shares are ShareManager objects) or\n"
      "local processes (shares from flags, a store file or etcd). Prints every share's\n"
      "phase as it changes.\n"
      "Exit codes: 0 stopped by a signal; 1 failed, or another share-controller holds the\n"
      "store file or work dir, or etcd cannot be reached; 2 bad flags or an unusable file\n"
      "(an unreadable store); 3 lost the leadership (etcd's or the Lease), pods left running."};
  std::vector<std::string> shares;
  std::string shares_file, store_file, work_dir = "/var/lib/share-controller";
  std::string binary = SiblingBinary(argv[0], "share-manager");
  std::vector<std::string> daemon_flags;
  int workers = 4;
  std::string grace = "2s", rpc_timeout = "1s", resync = "1s", remount_delay = "5s";
  std::string repair_budget = "30m";
  bool stop_pods_on_exit = true, ephemeral_pods = false;
  std::string termination_grace = "0s";
  std::string port_range =
      absl::StrCat(controller::kDefaultPortRange.first, "-", controller::kDefaultPortRange.last);
  std::string readonly_budget = "2m";
  unsigned max_remounts = 3;
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text, or json: one JSON object per line (time, level, component, volume, epoch, "
                 "message, the event's fields)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--share", shares, "Serve this volume (repeatable)");
  app.add_option("--shares-file", shares_file, "File with one volume name per line");
  app.add_option("--store-file", store_file,
                 "Persist share records here (JSON lines) so a restart resumes");
  std::string store_url, etcd_timeout = "5s";
  app.add_option("--store", store_url,
                 "Keep share records in etcd (v3 API, tried in order) under PREFIX/shares/: "
                 "etcd://HOST:PORT[,HOST:PORT...]/PREFIX. Instead of --store-file; replicas on "
                 "one prefix elect one leader (PREFIX/leader), the only one that acts");
  app.add_option("--etcd-timeout", etcd_timeout, "Deadline of every etcd call")
      ->capture_default_str();
  // The client side of base's TLS flags under other names: etcd's CA and
  // certificates are not the share-managers'. With --pod-leases the pods get
  // the same files (docs/DESIGN-NOTES.md "Highly available share-controller").
  base::TlsFlags etcd_tls;
  base::AddClientTlsFlagsAs(app, etcd_tls, "--etcd-", "etcd");
  app.add_option("--work-dir", work_dir, "Volumes' export/state dirs and pod logs")
      ->capture_default_str();
  app.add_option("--share-manager-binary", binary, "share-manager executable")
      ->capture_default_str();
  app.add_option("--daemon-flag", daemon_flags,
                 "Extra flag for every share-manager daemon (repeatable, e.g. "
                 "--daemon-flag=--grace-period=2)");
  app.add_option("--workers", workers, "Reconcile workers")->capture_default_str();
  app.add_option("--unhealthy-grace", grace, "Unreachable/not SERVING this long -> replace")
      ->capture_default_str();
  app.add_option("--rpc-timeout", rpc_timeout, "Deadline of every share-manager call")
      ->capture_default_str();
  app.add_option("--resync", resync, "Re-observe serving shares this often")->capture_default_str();
  app.add_option("--remount-delay", remount_delay, "Act on a remount request this long after it")
      ->capture_default_str();
  app.add_option("--repair-budget", repair_budget,
                 "A share-manager that answers and reports a repair running no longer than this "
                 "is not replaced")
      ->capture_default_str();
  app.add_option("--stop-pods-on-exit", stop_pods_on_exit,
                 "Delete every pod (and wait until they are gone) when stopping; false: pods keep "
                 "running and the next share-controller on this work dir adopts them (the "
                 "default with --store etcd://: the next leader does)")
      ->capture_default_str();
  app.add_flag("--ephemeral-pods", ephemeral_pods,
               "Pods get SIGKILL when share-controller dies however it dies (PR_SET_PDEATHSIG)");
  app.add_option("--termination-grace", termination_grace,
                 "SIGTERM to SIGKILL delay when deleting a pod (0s: per pod, twice the "
                 "--stop-timeout its daemon runs with plus 5s)")
      ->capture_default_str();
  app.add_option("--port-range", port_range,
                 "Volumes' gRPC and NFS ports are drawn at random from FIRST-LAST, clipped to end "
                 "below the kernel's ephemeral range (net.ipv4.ip_local_port_range), whose ports "
                 "outgoing connections take")
      ->capture_default_str();
  app.add_option("--readonly-budget", readonly_budget,
                 "A share read-only this long (and not repairing) is replaced")
      ->capture_default_str();
  app.add_option("--max-remounts", max_remounts,
                 "A share read-only again after this many acknowledged remounts is replaced")
      ->capture_default_str();
  // mTLS to share-managers whose --listen serves TLS (give them theirs with
  // --daemon-flag=--tls-dir=...).
  base::TlsFlags tls;
  base::AddTlsFlags(app, tls, base::TlsRole::kClient);
  controller::HaFlags ha_flags;
  controller::AddHaFlags(app, ha_flags);
  controller::kubernetes::KubernetesFlags k8s;
  controller::kubernetes::AddKubernetesFlags(app, k8s);
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus metrics over plain HTTP at HOST:PORT/metrics, and probes: "
                 "/healthz (the process answers) and /readyz (reconciling, and with --kubernetes "
                 "watching the apiserver) (default: off)");
  CLI11_PARSE(app, argc, argv);
  if (!metrics_listen.empty()) {
    if (auto v = base::ValidateListen("--metrics-listen", metrics_listen); !v.ok()) {
      std::cerr << "share-controller: " << v.message() << "\n";
      return 2;
    }
  }
  // Its log lines; a bad flag still gets one plain line on stderr and exit 2.
  if (log_format == "json") base::UseJsonLogs("share-controller", {});
  if (auto s = controller::kubernetes::CheckKubernetesFlags(app, k8s); !s.ok()) {
    std::cerr << "share-controller: " << s.message() << "\n";
    return 2;
  }
  // A template that cannot make a pod stops the controller here, naming the
  // field, rather than every share's pod failing the same way later.
  std::optional<controller::kubernetes::PodTemplate> pod_template;
  std::optional<controller::LeaderFlags> k8s_leader;
  if (k8s.enabled) {
    auto loaded = controller::kubernetes::LoadPodTemplate(k8s.pod_template);
    if (!loaded.ok()) {
      std::cerr << "share-controller: " << loaded.status().message() << "\n";
      return 2;
    }
    pod_template = *std::move(loaded);
    auto leader = controller::ResolveLeaderFlags(ha_flags);
    if (!leader.ok()) {
      std::cerr << "share-controller: " << leader.status().message() << "\n";
      return 2;
    }
    k8s_leader = *std::move(leader);
  }

  if (!shares_file.empty()) {
    auto content = base::ReadFile(shares_file);
    if (!content.ok()) {
      std::cerr << "share-controller: cannot read the shares file: " << content.status().message()
                << "\n";
      return 2;
    }
    for (absl::string_view line : absl::StrSplit(*content, '\n', absl::SkipEmpty())) {
      if (line[0] != '#') shares.emplace_back(line);
    }
  }
  for (const auto& s : shares) {
    if (auto v = base::ValidateVolumeName(s); !v.ok()) {
      std::cerr << "share-controller: " << v.message() << "\n";
      return 2;
    }
  }
  if (auto v = base::ValidateConfigPath("--work-dir", work_dir); !v.ok()) {
    std::cerr << "share-controller: " << v.message() << "\n";
    return 2;
  }
  std::optional<etcd::EtcdUrl> etcd_url;
  if (!store_url.empty()) {
    auto parsed = etcd::ParseEtcdUrl(store_url);
    if (!parsed.ok()) {
      std::cerr << "share-controller: --store: " << parsed.status().message() << "\n";
      return 2;
    }
    if (!store_file.empty()) {
      std::cerr << "share-controller: --store and --store-file: give one or the other\n";
      return 2;
    }
    etcd_url = *std::move(parsed);
    if (ephemeral_pods) {
      std::cerr << "share-controller: --ephemeral-pods and --store etcd://: pods must outlive the "
                   "leader that started them\n";
      return 2;
    }
    // A leader that stops hands its pods to the next one, unless told
    // otherwise (one replica, tests): those deletes at exit are not gated on
    // the leadership (docs/DESIGN-NOTES.md "Highly available share-controller").
    if (app.count("--stop-pods-on-exit") == 0) stop_pods_on_exit = false;
  } else if (auto s = controller::RefuseHaFlagsWithoutEtcd(app, k8s.enabled); !s.ok()) {
    std::cerr << "share-controller: " << s.message() << "\n";
    return 2;
  } else if (base::AnyTlsFlag(etcd_tls)) {
    std::cerr << "share-controller: the --etcd-* TLS flags need --store etcd://...\n";
    return 2;
  }
  const auto etcd_call_timeout = std::chrono::milliseconds(ParseMs("--etcd-timeout", etcd_timeout));
  // Checked here too (not only by the runtime): a bad range is a bad flag, and
  // found before anything is written.
  auto ports = base::ParsePortRange(port_range);
  if (ports.ok()) ports = controller::LocalPortTable::Usable(*ports);
  if (!ports.ok()) {
    std::cerr << "share-controller: --port-range: " << ports.status().message() << "\n";
    return 2;
  }

  // A pod's start gate is a pipe: a pod that died before it was released
  // must cost a logged warning, not this process.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // After the mask: the credentials' file watcher is a thread, and every
  // thread must leave SIGTERM to sigwait below. Still before anything is written.
  auto security = base::ResolveClientSecurity(tls);
  if (!security.ok()) {
    std::cerr << "share-controller: " << security.status().message() << "\n";
    return 2;
  }
  auto etcd_security = base::ResolveClientSecurity(etcd_tls, "--etcd-");
  if (!etcd_security.ok()) {
    std::cerr << "share-controller: " << etcd_security.status().message() << "\n";
    return 2;
  }
  std::optional<controller::HaReplicaOptions> ha;
  if (etcd_url) {
    auto resolved =
        controller::ResolveHaReplica(ha_flags, *etcd_url, *etcd_security, etcd_tls, work_dir);
    if (!resolved.ok()) {
      std::cerr << "share-controller: " << resolved.status().message() << "\n";
      return 2;
    }
    ha = *std::move(resolved);
  }

  // Two controllers on one store file would overwrite each other's records
  // (and epochs): locked before it is read, held until exit. The work dir is
  // the runtime's to lock (below): two controllers on it would run two pods
  // per volume.
  if (auto s = k8s.enabled ? absl::OkStatus() : base::EnsureDirectory(work_dir, 0755); !s.ok()) {
    std::cerr << "share-controller: --work-dir: " << s.message() << "\n";
    return 1;
  }
  std::optional<base::FileLock> store_lock;
  if (!store_file.empty()) {
    // Beside the store, not on it: the store file is replaced by a rename on
    // every write, which would leave a lock on it behind on the old inode.
    auto held = base::FileLock::Acquire(store_file + ".lock", base::FileLock::Kind::kLockFile,
                                        "share-controller");
    if (!held.ok()) {
      std::cerr << "share-controller: " << held.status().message() << "\n";
      return 1;
    }
    store_lock = *std::move(held);
  }

  // Declared before the store: its watcher (below) prints with it.
  struct {
    absl::Mutex mu;
    std::map<std::string, std::string> last_line ABSL_GUARDED_BY(mu);
  } printed;
  std::unique_ptr<controller::Store> store;
  controller::EtcdStore* etcd_store = nullptr;
  std::unique_ptr<controller::kubernetes::KubernetesBackends> kubernetes;
  if (k8s.enabled) {
    auto opened =
        controller::kubernetes::OpenKubernetes(k8s, *std::move(pod_template), *k8s_leader);
    if (!opened.ok()) {
      std::cerr << "share-controller: " << opened.status().message() << "\n";
      return 1;
    }
    kubernetes = *std::move(opened);
  } else if (etcd_url) {
    auto client = etcd::EtcdClient::Create({.endpoints = etcd_url->endpoints,
                                            .call_timeout = etcd_call_timeout,
                                            .security = *etcd_security});
    auto opened = client.ok() ? controller::EtcdStore::Open(*std::move(client), etcd_url->prefix)
                              : client.status();
    if (!opened.ok()) {
      std::cerr << "share-controller: --store: " << opened.status().message() << "\n";
      return 1;
    }
    etcd_store = opened->get();
    store = *std::move(opened);
  } else if (store_file.empty()) {
    store = std::make_unique<controller::MemoryStore>();
  } else {
    auto opened = controller::MemoryStore::OpenFile(store_file);
    if (!opened.ok()) {
      std::cerr << "share-controller: " << opened.status().message() << "\n";
      return 2;
    }
    store = *std::move(opened);
  }
  // Before anything reports to it; it outlives the endpoint that scrapes it.
  std::optional<controller::ControllerMetrics> metrics;
  if (!metrics_listen.empty()) metrics.emplace();
  // Served from before the leadership wait: a follower with --kubernetes is
  // ready while it stands by with its informers synced and reads its Lease,
  // so a rolling update can go on (with etcd, only the leader is ready).
  std::atomic<bool> standing_by{false}, reconciling{false};
  std::unique_ptr<metrics::Endpoint> metrics_endpoint;
  if (metrics) {
    if (kubernetes) {
      metrics->SetApiRequests([&client = *kubernetes->client] { return client.RequestCounts(); });
    }
    metrics::HealthChecks probes{.live = [] { return absl::OkStatus(); },
                                 .ready =
                                     [&standing_by, &reconciling, backends = kubernetes.get()] {
                                       if (!standing_by && !reconciling) {
                                         return absl::UnavailableError("not reconciling yet");
                                       }
                                       return backends != nullptr ? backends->Ready()
                                                                  : absl::OkStatus();
                                     }};
    auto endpoint =
        metrics::Endpoint::Start(metrics_listen, metrics->catalogue(), std::move(probes));
    if (!endpoint.ok()) {
      std::cerr << "share-controller: --metrics-listen: " << endpoint.status().message() << "\n";
      return 1;
    }
    metrics_endpoint = *std::move(endpoint);
    spdlog::info("metrics (Prometheus text, plain HTTP) on http://{}{}", metrics_listen,
                 metrics::kMetricsPath);
  }
  // A replica waits here until it leads: only then does it write, adopt the
  // pods and reconcile.
  if (kubernetes) {
    standing_by = true;
    int sig = 0;
    if (!kubernetes->leadership->AwaitLeadership(stop_signals, &sig)) {
      spdlog::info("received signal {} before leading; stopping", sig);
      // A Lease won meanwhile is released as the backends go, quietly.
      kubernetes->leadership->Stopping();
      return 0;
    }
  }
  std::unique_ptr<controller::HaReplica> replica;
  if (ha) {
    auto started = controller::HaReplica::Start(*std::move(ha), *etcd_store);
    if (!started.ok()) {
      std::cerr << "share-controller: " << started.status().message() << "\n";
      return 1;
    }
    replica = *std::move(started);
    int sig = 0;
    if (!replica->AwaitLeadership(stop_signals, &sig)) {
      spdlog::info("received signal {} before leading; stopping", sig);
      return 0;
    }
    const auto lease_flags = replica->PodDaemonFlags();
    daemon_flags.insert(daemon_flags.begin(), lease_flags.begin(), lease_flags.end());
  }
  controller::Store& the_store = kubernetes ? *kubernetes->store : *store;
  controller::Store& acting_store = replica ? replica->acting_store() : the_store;
  for (const auto& volume : shares) {
    v1::ShareRecord record;
    record.set_name(volume);
    record.mutable_spec()->set_volume(volume);
    record.mutable_spec()->set_serve(true);
    auto created = acting_store.Create(record);
    if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) {
      std::cerr << "share-controller: " << created.status().message() << "\n";
      return 1;
    }
  }

  // Flags parsed (ParseMs may exit) before the runtime's monitor thread starts.
  controller::GrpcShareConnector connector(
      {.deadline = std::chrono::milliseconds(ParseMs("--rpc-timeout", rpc_timeout)),
       .security = *security},
      metrics ? metrics->RpcErrors() : nullptr);
  // The wall clock only stamps the record; every duration is measured on
  // the monotonic clock, so a clock step neither stalls nor hastens a failover.
  controller::SystemWallClock clock;
  controller::SteadyMonotonicClock mono;
  controller::ControllerOptions options;
  options.workers = workers;
  options.reconciler.unhealthy_grace_ms = ParseMs("--unhealthy-grace", grace);
  options.reconciler.resync_ms = ParseMs("--resync", resync);
  options.reconciler.remount_delay_ms = ParseMs("--remount-delay", remount_delay);
  options.reconciler.repair_budget_ms = ParseMs("--repair-budget", repair_budget);
  options.reconciler.readonly_budget_ms = ParseMs("--readonly-budget", readonly_budget);
  options.reconciler.max_remounts = max_remounts;
  options.watch_security = *security;
  if (metrics) options.hooks = metrics->Hooks();
  if (kubernetes) {
    options.hooks.transition = [&backends = *kubernetes](const std::string& share,
                                                         const v1::ShareStatusRecord& status) {
      backends.RecordTransition(share, status);
    };
  }
  // Holds the work dir until exit: another share-controller on it is refused.
  std::unique_ptr<controller::LocalPodRuntime> local_runtime;
  if (!kubernetes) {
    auto opened =
        controller::LocalPodRuntime::Open({.share_manager_binary = binary,
                                           .work_dir = work_dir,
                                           .daemon_flags = daemon_flags,
                                           .termination_grace = std::chrono::milliseconds(
                                               ParseMs("--termination-grace", termination_grace)),
                                           .ephemeral = ephemeral_pods,
                                           .stop_pods_on_exit = stop_pods_on_exit,
                                           .port_range = *ports,
                                           .lock_holder = "share-controller",
                                           .share_work_dir = replica != nullptr});
    if (!opened.ok()) {
      std::cerr << "share-controller: " << opened.status().message() << "\n";
      return 1;
    }
    local_runtime = *std::move(opened);
  }
  controller::PodRuntime& runtime =
      kubernetes ? static_cast<controller::PodRuntime&>(*kubernetes->runtime) : *local_runtime;
  controller::PodRuntime& acting_runtime = replica ? replica->Acting(runtime) : runtime;
  // Kubernetes pods outlive share-controller; local ones go as it says.
  auto stop_runtime = [&](bool leave_pods) {
    if (!local_runtime) return;
    if (leave_pods) {
      local_runtime->ShutdownLeavingPods();
    } else {
      local_runtime->Shutdown();
    }
  };

  // Print phase changes as they are recorded.
  the_store.Watch([&](const std::string& name) {
    auto record = the_store.Get(name);
    if (!record.ok()) return;
    const auto& st = record->status();
    const std::string line =
        fmt::format("{} {} epoch={} pod={} {}", name, v1::Phase_Name(st.phase()), st.epoch(),
                    st.pod().empty() ? "-" : st.pod(), st.reason());
    absl::MutexLock lock(&printed.mu);
    if (printed.last_line[name] == line) return;
    printed.last_line[name] = line;
    const base::LogFields fields({{"volume", name},
                                  {"epoch", st.epoch()},
                                  {"phase", v1::Phase_Name(st.phase())},
                                  {"pod", st.pod()},
                                  {"reason", st.reason()}});
    spdlog::info("{}", line);
  });

  controller::Controller controller(acting_store, acting_runtime, connector, clock, mono, options);
  // The endpoint outlives the controller: scrapes stop reading it before it goes.
  if (metrics) metrics->SetQueueDepth([&controller] { return controller.QueueDepth(); });
  absl::Cleanup forget_queue_depth = [&metrics] {
    if (metrics) metrics->SetQueueDepth({});
  };
  if (auto s = controller.Start(); !s.ok()) {
    std::cerr << "share-controller: " << s.message() << " (pods left running)\n";
    stop_runtime(true);
    return 1;
  }
  reconciling = true;
  standing_by = false;
  if (kubernetes) {
    spdlog::info("controlling the ShareManagers of namespace {}", kubernetes->namespace_name);
  } else {
    spdlog::info("controlling {} share(s); share-manager: {}; work dir: {}", shares.size(), binary,
                 work_dir);
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  reconciling = false;  // unready from here on: it stops
  spdlog::info("received signal {}; stopping ({})", sig,
               !kubernetes && (stop_pods_on_exit || ephemeral_pods) ? "pods are deleted"
                                                                    : "pods keep running");
  // In this order, nothing hears from an object already gone: the workers stop
  // (no more store writes or pod creates), then the runtime deletes its pods
  // and stops its monitor (its last notifications reach a stopped queue).
  controller.Stop();
  stop_runtime(false);
  // Acting has ended: a follower may take over at once. A leadership lost
  // while the workers drained was an exit 3; from here on it is logged.
  if (kubernetes) {
    kubernetes->leadership->Stopping();
    kubernetes->StopEvents();
    kubernetes->leadership->Resign();
  }
  if (replica) replica->Resign();
  return 0;
}
