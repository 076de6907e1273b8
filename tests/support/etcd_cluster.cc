#include "tests/support/etcd_cluster.h"

#include <unistd.h>

#include <atomic>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/loopback_port.h"
#include "tests/support/leftovers.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace testing_support {
namespace {

// Elections in about half a second, not etcd's 1-2 s: a test that kills a
// leader waits that long for the next. Still 10 heartbeats per election
// timeout, as etcd advises, so a loaded machine does not flap leaders.
constexpr char kHeartbeatMs[] = "50";
constexpr char kElectionMs[] = "500";
// Starting takes an election and, on a busy machine, fsyncs: generous.
constexpr std::chrono::seconds kHealthyWithin{30};
// What etcd logs once it serves clients ("...insecurely" or "...securely").
constexpr char kServing[] = "serving client traffic";

std::string ClientUrl(bool tls, uint16_t port, const std::string& address = "127.0.0.1") {
  return absl::StrCat(tls ? "https" : "http", "://", address, ":", port);
}

std::string PeerUrl(uint16_t port) { return absl::StrCat("http://127.0.0.1:", port); }

// A free port none of the cluster's others has (the kernel may hand out one
// twice while nothing listens on it yet).
uint16_t UnusedPort(std::set<uint16_t>& taken) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint16_t port = base::FreeLoopbackPort();
    REQUIRE(port != 0);
    if (taken.insert(port).second) return port;
  }
  FAIL("no unused loopback port");
  return 0;
}

}  // namespace

EtcdCluster::EtcdCluster(Options options) : options_(std::move(options)) {
  REQUIRE_MESSAGE(options_.members > 0, "a cluster needs a member");
  static std::atomic<int> clusters{0};
  token_ = absl::StrCat("sharemgr-test-", getpid(), "-", clusters++);
  std::vector<std::string> peers;
  std::set<uint16_t> taken;
  members_.resize(static_cast<size_t>(options_.members));
  for (int i = 0; i < size(); ++i) {
    Member& m = members_[static_cast<size_t>(i)];
    m.name = absl::StrCat("m", i);
    m.dir = absl::StrCat(dir_.path(), "/", m.name);
    m.log = absl::StrCat(dir_.path(), "/", m.name, ".log");
    m.client_port = UnusedPort(taken);
    m.peer_port = UnusedPort(taken);
    peers.push_back(absl::StrCat(m.name, "=", PeerUrl(m.peer_port)));
  }
  initial_cluster_ = absl::StrJoin(peers, ",");
  for (int i = 0; i < size(); ++i) Start(i);
  for (int i = 0; i < size(); ++i) WaitHealthy(i);
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) {
    if (pid(i) == 0) continue;
    KillPid(pid(i), SIGKILL);
    if (!members_[static_cast<size_t>(i)].process->WaitExit(std::chrono::seconds(15))) {
      ReportLeftover(absl::StrCat("etcd member ", i, " (pid ", pid(i), ") survived SIGKILL"));
    }
  }
}

std::string EtcdCluster::endpoint(int member) const {
  return absl::StrCat("127.0.0.1:", members_[static_cast<size_t>(member)].client_port);
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
  return out;
}

std::vector<std::string> EtcdCluster::endpoints_on_also_listen() const {
  REQUIRE_MESSAGE(!options_.also_listen_on.empty(), "the cluster listens on loopback only");
  std::vector<std::string> out;
  for (const Member& m : members_) {
    out.push_back(absl::StrCat(options_.also_listen_on, ":", m.client_port));
  }
  return out;
}

pid_t EtcdCluster::pid(int member) const {
  const auto& process = members_[static_cast<size_t>(member)].process;
  return process ? process->pid() : 0;
}

void EtcdCluster::Start(int member) {
  const Member& m = members_[static_cast<size_t>(member)];
  const bool tls = options_.server_tls.has_value();
  std::string listen = ClientUrl(tls, m.client_port);
  if (!options_.also_listen_on.empty()) {
    absl::StrAppend(&listen, ",", ClientUrl(tls, m.client_port, options_.also_listen_on));
  }
  // etcd logs a lot: into a file through the shell (exec: the pid is etcd's),
  // not into a pipe nobody drains while the test runs.
  std::vector<std::string> argv = {"sh",
                                   "-c",
                                   "exec \"$@\" >>\"$0\" 2>&1",
                                   m.log,
                                   "etcd",
                                   "--name",
                                   m.name,
                                   "--data-dir",
                                   m.dir,
                                   "--listen-client-urls",
                                   listen,
                                   "--advertise-client-urls",
                                   ClientUrl(tls, m.client_port),
                                   "--listen-peer-urls",
                                   PeerUrl(m.peer_port),
                                   "--initial-advertise-peer-urls",
                                   PeerUrl(m.peer_port),
                                   "--initial-cluster",
                                   initial_cluster_,
                                   "--initial-cluster-token",
                                   token_,
                                   "--initial-cluster-state",
                                   "new",
                                   "--heartbeat-interval",
                                   kHeartbeatMs,
                                   "--election-timeout",
                                   kElectionMs,
                                   "--logger",
                                   "zap"};
  if (tls) {
    const TestCert& cert = *options_.server_tls;
    argv.insert(argv.end(), {"--cert-file", cert.cert, "--key-file", cert.key, "--trusted-ca-file",
                             cert.ca, "--client-cert-auth"});
  }
  members_[static_cast<size_t>(member)].process = std::make_unique<ProgramProcess>(argv);
}

bool EtcdCluster::Healthy(int member) const {
  const auto& kv = members_[static_cast<size_t>(member)].kv;
  if (!kv) return false;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  etcdserverpb::RangeRequest request;
  request.set_key("health");
  etcdserverpb::RangeResponse response;
  return kv->Range(&context, request, &response).ok();
}

void EtcdCluster::WaitHealthy(int member) {
  Member& m = members_[static_cast<size_t>(member)];
  // etcd listens long before it serves. A gRPC channel that tried to
  // connect meanwhile was seen failing every call at once for 10 s after
  // etcd served, so the first call is made once etcd says it serves, on a
  // channel made then.
  const auto serving = [&] {
    const std::string log = Log(member);
    size_t count = 0;
    for (auto at = log.find(kServing); at != std::string::npos; at = log.find(kServing, at + 1)) {
      ++count;
    }
    return count > m.starts_served;
  };
  REQUIRE_MESSAGE(WaitFor(serving, kHealthyWithin), "etcd member ", member,
                  " does not serve clients; its log:\n", Log(member));
  ++m.starts_served;
  grpc::ChannelArguments args;
  options_.client_security.Apply(args);
  m.kv = etcdserverpb::KV::NewStub(
      grpc::CreateCustomChannel(endpoint(member), options_.client_security.credentials(), args));
  const bool healthy = WaitFor([&] { return Healthy(member); }, kHealthyWithin);
  REQUIRE_MESSAGE(healthy, "etcd member ", member, " is not healthy; its log:\n", Log(member));
}

std::string EtcdCluster::Log(int member) const {
  auto log = base::ReadFile(members_[static_cast<size_t>(member)].log);
  return log.ok() ? *log : log.status().ToString();
}

void EtcdCluster::Reap(int member, int signal) {
  REQUIRE_MESSAGE(pid(member) != 0, "etcd member ", member, " is not running");
  auto& process = members_[static_cast<size_t>(member)].process;
  KillPid(process->pid(), signal);
  REQUIRE(process->WaitExit(std::chrono::seconds(15)).has_value());
  process.reset();
  // A write proposed while the others still follow a dead leader is lost
  // and waits out its deadline: tests write once they have a leader again.
  int running = 0;
  for (int i = 0; i < size(); ++i) running += pid(i) != 0 ? 1 : 0;
  if (running <= size() / 2) return;
  for (int i = 0; i < size(); ++i) {
    if (pid(i) == 0) continue;
    REQUIRE_MESSAGE(WaitFor([&] { return Healthy(i); }, kHealthyWithin), "etcd member ", i,
                    " has no leader after member ", member, " stopped; its log:\n", Log(i));
  }
}

void EtcdCluster::Kill(int member) { Reap(member, SIGKILL); }

void EtcdCluster::Stop(int member) { Reap(member, SIGTERM); }

void EtcdCluster::Restart(int member) {
  REQUIRE_MESSAGE(pid(member) == 0, "etcd member ", member, " is still running");
  Start(member);
  WaitHealthy(member);
}

}  // namespace testing_support
