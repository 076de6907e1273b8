// A real etcd cluster for a test: N members (3 by default) on 127.0.0.1,
// each with free client and peer ports (never etcd's 2379/2380) and its own
// data dir and log in a temp dir; all healthy when the constructor returns.
// A member can be killed, stopped and restarted, by pid. When the object
// goes, pass or fail, every member still running is killed and reaped and
// the temp dir removed.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/tls.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "tests/support/program_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace testing_support {

class EtcdCluster {
 public:
  struct Options {
    int members = 3;
    // Clients get mutual TLS only: this certificate is served, and client
    // certificates must chain to its CA.
    std::optional<TestCert> server_tls;
    // How the cluster checks its members' health (with server_tls: a client
    // certificate its CA signed).
    base::ClientSecurity client_security;
    // Clients may also reach every member on this address (e.g. a test network
    // namespace's host end, for a share-manager inside it), on the same port.
    std::string also_listen_on;
  };

  EtcdCluster() : EtcdCluster(Options{}) {}
  explicit EtcdCluster(Options options);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:PORT", the member's client address.
  std::string endpoint(int member) const;
  std::vector<std::string> endpoints() const;
  // "ADDRESS:PORT" of every member on Options::also_listen_on.
  std::vector<std::string> endpoints_on_also_listen() const;
  // 0 when the member is not running.
  pid_t pid(int member) const;

  // SIGKILL, and reaped. Returns once the members left have a leader
  // again, when they are a quorum.
  void Kill(int member);
  // SIGTERM (etcd's clean stop), and reaped; as Kill otherwise.
  void Stop(int member);
  // Starts a member that was killed or stopped again, on its data dir, and
  // waits until it is healthy.
  void Restart(int member);
  // The member answers a linearizable read: it has a leader and a quorum.
  bool Healthy(int member) const;
  // What the member logged.
  std::string Log(int member) const;

 private:
  struct Member {
    std::string name, dir, log;
    uint16_t client_port = 0, peer_port = 0;
    std::unique_ptr<ProgramProcess> process;
    // Its starts that logged serving clients (its log is appended to).
    size_t starts_served = 0;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;  // health checks, once it serves
  };
  void Start(int member);
  // REQUIREs it within a generous bound, showing its log when it is not.
  void WaitHealthy(int member);
  void Reap(int member, int signal);

  Options options_;
  TempDir dir_{"etcd-test"};
  std::string initial_cluster_, token_;
  std::vector<Member> members_;
};

}  // namespace testing_support
