// The serving lease against an etcd that speaks mutual TLS only (issue #12):
// share-manager's --lease-etcd-* give its lease client the certificates, as
// the controller's --etcd-* give its store's. A real etcd member, a real
// share-manager serving a directory through a real ganesha.
#include <doctest/doctest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "etcd/client.h"
#include "sharemgr/etcd_lease_backend.h"
#include "sharemgr/exit_codes.h"
#include "tests/support/daemon_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/etcd_keys.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::EtcdCluster;
using testing_support::EtcdGet;
using testing_support::RequireOk;
using testing_support::TestCa;
using testing_support::TestCert;

constexpr char kLeaseKey[] = "/sharemgr/leases/pvc-test";

// One etcd member serving mTLS only, its CA's client certificate for the
// share-manager (and the test's own look at the keys), and a certificate of
// another CA that etcd must not take.
struct TlsEtcd {
  testing_support::TempDir certs{"lease-etcd-tls"};
  TestCa ca{certs.path(), "etcd-ca"};
  TestCa other_ca{certs.path(), "other-ca"};
  TestCert client_cert = ca.Issue("share-manager", "share-manager", {"DNS:share-manager"});
  TestCert foreign_cert = other_ca.Issue("foreign", "share-manager", {"DNS:share-manager"});
  std::string client_dir = testing_support::WriteSecretDir(certs.path() + "/secret", client_cert);
  base::ClientSecurity security = testing_support::Security(client_cert, "");
  EtcdCluster cluster{{.members = 1,
                       .server_tls = ca.Issue("etcd", "etcd", {"IP:127.0.0.1"}),
                       .client_security = security}};
  std::unique_ptr<etcd::EtcdClient> client =
      RequireOk(etcd::EtcdClient::Create({.endpoints = cluster.endpoints(), .security = security}));
  testing_support::TempDir export_dir{"lease-tls-export"};

  // A share-manager of epoch `epoch` (a lease once taken is never taken
  // again under the same epoch).
  std::unique_ptr<DaemonProcess> Start(uint64_t epoch, const std::vector<std::string>& tls_flags,
                                       bool wait_until_serving) const {
    std::vector<std::string> flags = {"--export-dir",    export_dir.path(),
                                      "--epoch",         std::to_string(epoch),
                                      "--lease-etcd",    absl::StrJoin(cluster.endpoints(), ","),
                                      "--lease-ttl",     "2s",
                                      "--start-timeout", "2s"};
    flags.insert(flags.end(), tls_flags.begin(), tls_flags.end());
    return RequireOk(
        DaemonProcess::Start({.extra_flags = flags, .wait_until_serving = wait_until_serving}));
  }
};

}  // namespace

TEST_CASE(
    "serving lease over etcd mTLS: with --lease-etcd-dir (or -cert/-key/-ca) the lease is taken "
    "and NFS is served under it, and revoked at SIGTERM") {
  TlsEtcd etcd;
  const std::vector<std::vector<std::string>> spellings = {
      {"--lease-etcd-dir", etcd.client_dir},
      {"--lease-etcd-cert", etcd.client_cert.cert, "--lease-etcd-key", etcd.client_cert.key,
       "--lease-etcd-ca", etcd.client_cert.ca}};
  uint64_t epoch = 3;
  for (const auto& tls_flags : spellings) {
    CAPTURE(tls_flags.front());
    auto d = etcd.Start(epoch, tls_flags, true);
    const auto holder = RequireOk(EtcdGet(*etcd.client, kLeaseKey));
    CHECK(holder.value().substr(0, 21) == sharemgr::PaddedEpoch(epoch) + " ");
    const auto status = RequireOk(d->Status());
    CHECK(status.state() == v1::SERVING);
    CHECK(status.lease().held());
    REQUIRE(d->WriteEventually("/over-tls.txt", "under a lease taken over mTLS").ok());
    CHECK(RequireOk(d->ReadEventually("/over-tls.txt")) == "under a lease taken over mTLS");
    d->Signal(SIGTERM);
    REQUIRE(RequireOk(d->WaitExit(milliseconds(30'000))) == sharemgr::kExitStopped);
    // Revoked over TLS too: the next spelling (the next epoch) takes it at once.
    CHECK_FALSE(EtcdGet(*etcd.client, kLeaseKey).has_value());
    ++epoch;
  }
}

TEST_CASE(
    "serving lease over etcd mTLS: without a client certificate etcd takes (plaintext, or one of "
    "another CA) the lease is never taken and nothing is served (exit 6)") {
  TlsEtcd etcd;
  const std::vector<std::vector<std::string>> refused = {
      {},
      {"--lease-etcd-cert", etcd.foreign_cert.cert, "--lease-etcd-key", etcd.foreign_cert.key,
       "--lease-etcd-ca", etcd.client_cert.ca}};
  for (const auto& tls_flags : refused) {
    CAPTURE(absl::StrJoin(tls_flags, " "));
    auto d = etcd.Start(3, tls_flags, false);
    // Looked at until it exits (acquire timeout: TTL + margin + --start-timeout).
    bool ever_serving = false;
    for (int i = 0; i < 300 && !d->WaitExit(milliseconds(100)).ok(); ++i) {
      const auto status = d->Status(milliseconds(500));
      if (status.ok() && status->state() == v1::SERVING) ever_serving = true;
    }
    CHECK(RequireOk(d->WaitExit(milliseconds(30'000))) == sharemgr::kExitLeaseLost);
    CHECK_FALSE(ever_serving);
    CHECK_FALSE(EtcdGet(*etcd.client, kLeaseKey).has_value());
    CHECK(d->output().find("exiting with code 6") != std::string::npos);
  }
}
