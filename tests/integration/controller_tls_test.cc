// The controller's side of mutual TLS against real share-managers: the
// client, the watch and the connector, then share-controller running TLS pods.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "controller/runtime/grpc_share_connector.h"
#include "controller/share_client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/program_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

using std::chrono::milliseconds;
using testing_support::Security;
using testing_support::ShareCerts;

// A fresh client per attempt while the daemon starts, as the connector does
// after UNAVAILABLE: a channel refused early sits out gRPC's backoff.
absl::StatusOr<sharemanager::v1::ShareStatus> WaitServing(const std::string& addr,
                                                          const ShareClientOptions& options) {
  absl::StatusOr<sharemanager::v1::ShareStatus> status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  do {
    status = ShareClient(addr, options).GetStatus();
    if (status.ok() && status->state() == sharemanager::v1::SERVING) break;
    std::this_thread::sleep_for(milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  return status;
}

// A TLS share-manager that ends every connection after 1 s (the minimum, and
// so a 1 s grace), SERVING as `allowed` sees it.
std::unique_ptr<testing_support::DaemonProcess> StartAgingConnections(
    const ShareCerts& certs, const ShareClientOptions& allowed) {
  auto flags = certs.DaemonFlags();
  flags.insert(flags.end(), {"--max-connection-age", "1s"});
  auto d =
      testing_support::DaemonProcess::Start({.extra_flags = flags, .wait_until_serving = false});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const auto serving = WaitServing((*d)->addr(), allowed);
  REQUIRE_MESSAGE(serving.ok(), serving.status().ToString(), "\n", (*d)->output());
  return *std::move(d);
}

}  // namespace

TEST_CASE("mTLS: ShareClient, StatusWatch and the connector against a TLS share-manager") {
  const ShareCerts certs;
  auto d = testing_support::DaemonProcess::Start(
      {.extra_flags = certs.DaemonFlags(), .wait_until_serving = false});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const ShareClientOptions tls{.deadline = milliseconds(2000),
                               .security = Security(certs.client, "share-manager")};

  const auto status = WaitServing((*d)->addr(), tls);
  REQUIRE_MESSAGE(status.ok(), status.status().ToString(), "\n", (*d)->output());
  ShareClient client((*d)->addr(), tls);
  CHECK(status->state() == sharemanager::v1::SERVING);
  auto ready = client.Check("readiness");
  REQUIRE(ready.ok());
  CHECK(*ready);
  CHECK(client.Mount(0, 0).ok());

  // Plaintext (the old default) cannot reach it.
  ShareClient plaintext((*d)->addr(), {.deadline = milliseconds(1000)});
  CHECK(plaintext.GetStatus().status().code() == absl::StatusCode::kUnavailable);

  GrpcShareConnector connector(tls);
  const Pod pod{.name = "pod-tls",
                .volume = (*d)->volume(),
                .epoch = 0,
                .endpoint = (*d)->addr(),
                .started_unix_ms = status->started_unix_ms()};
  const auto seen = connector.Observe(pod);
  CHECK_MESSAGE(seen.reachable, seen.error);
  CHECK(seen.state == sharemanager::v1::SERVING);

  // What the watch has seen, as flags its callback raises.
  absl::Mutex mu;
  bool serving = false, withdrawn = false;
  StatusWatch watch((*d)->addr(),
                    [&](const StatusWatch::Event& e) {
                      absl::MutexLock lock(&mu);
                      serving =
                          serving || (e.status && e.status->state() == sharemanager::v1::SERVING);
                      withdrawn = withdrawn || (e.status && !e.status->exported());
                    },
                    tls.security);
  auto saw = [&](bool* flag) {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithTimeout(absl::Condition(flag), absl::Seconds(10));
  };
  CHECK(saw(&serving));
  CHECK(client.Unmount(0).ok());
  CHECK(saw(&withdrawn));
}

TEST_CASE(
    "mTLS: connections the server ends at their maximum age are replaced: the watch and the client "
    "carry on") {
  const ShareCerts certs;
  const ShareClientOptions tls{.deadline = milliseconds(2000),
                               .security = Security(certs.client, "share-manager")};
  const auto d = StartAgingConnections(certs, tls);

  absl::Mutex mu;
  bool answered = false;            // a status came
  int ended = 0;                    // streams ended after one had answered
  bool answered_after_end = false;  // a status on a stream opened after an end
  bool withdrawn = false;
  StatusWatch watch(
      d->addr(),
      [&](const StatusWatch::Event& e) {
        absl::MutexLock lock(&mu);
        if (!e.status) {
          ended += answered ? 1 : 0;
          return;
        }
        answered = true;
        answered_after_end = answered_after_end || ended > 0;
        withdrawn = withdrawn || !e.status->exported();
      },
      tls.security);
  auto saw = [&](const std::function<bool()>& what) {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithTimeout(absl::Condition(&what, &std::function<bool()>::operator()),
                               absl::Seconds(15));
  };
  // The server ends the stream's connection (GOAWAY at 1 s, cut after the
  // grace); the watch opens another at once and gets the status there.
  CHECK(saw([&] { return ended >= 2 && answered_after_end; }));
  // One client channel across several connection ages: each call finds a
  // live connection, and a change reaches the watch's newest stream.
  ShareClient client(d->addr(), tls);
  CHECK(client.GetStatus().ok());
  int ended_before = 0;
  {
    absl::MutexLock lock(&mu);
    ended_before = ended;
  }
  CHECK(saw([&] { return ended > ended_before; }));  // an age went by
  CHECK(client.GetStatus().ok());
  CHECK(client.Unmount(0).ok());
  CHECK(saw([&] { return withdrawn; }));
}

TEST_CASE(
    "mTLS: the controller's client certificate rotated in its Secret is presented without a new "
    "client, on the connections that replace those the server ends at their age") {
  const ShareCerts certs;
  const auto d = StartAgingConnections(
      certs, {.deadline = milliseconds(2000), .security = Security(certs.client, "share-manager")});

  // The controller's Secret starts with a certificate of the right CA for a
  // name the server does not allow.
  const auto intruder = certs.ca.Issue("intruder", "intruder", {"DNS:intruder"});
  const auto secret = testing_support::WriteSecretDir(certs.dir.path() + "/rotated", intruder);
  auto security = base::ResolveClientSecurity(
      {.dir = secret, .refresh_interval = "1s", .server_name = "share-manager"});
  REQUIRE_MESSAGE(security.ok(), security.status().ToString());
  ShareClient client(d->addr(), {.deadline = milliseconds(2000), .security = *security});
  CHECK(client.GetStatus().status().code() == absl::StatusCode::kPermissionDenied);

  auto answer = [&] { return client.GetStatus().status().code(); };
  testing_support::WriteSecretDir(secret, certs.client);
  CHECK_MESSAGE(testing_support::WaitFor([&] { return answer() == absl::StatusCode::kOk; },
                                         milliseconds(15'000)),
                d->output());
  CHECK(client.Unmount(0).ok());

  // And back: the same client loses the right as its Secret does.
  testing_support::WriteSecretDir(secret, intruder);
  CHECK(testing_support::WaitFor([&] { return answer() == absl::StatusCode::kPermissionDenied; },
                                 milliseconds(15'000)));
  CHECK(client.Mount(0, 0).status().code() == absl::StatusCode::kPermissionDenied);
}

TEST_CASE("share-controller with --tls-dir runs TLS pods and sees them RUNNING") {
  const ShareCerts certs;
  const testing_support::TempDir work("sharemgr-ctl-tls");
  const std::string controller_binary =
      std::filesystem::path(testing_support::ShareManagerBinary()).parent_path().parent_path() /
      "controller" / "share-controller";
  std::vector<std::string> argv = {controller_binary,
                                   "--work-dir",
                                   work.path(),
                                   "--share",
                                   "vol-tls",
                                   "--resync",
                                   "200ms",
                                   "--daemon-flag=--grace-period=2",
                                   "--daemon-flag=--lease-lifetime=2",
                                   "--tls-dir",
                                   certs.client_dir,
                                   "--tls-server-name",
                                   "share-manager"};
  for (const auto& flag : certs.DaemonFlags()) argv.push_back("--daemon-flag=" + flag);
  testing_support::ProgramProcess ctl(argv);
  CHECK_MESSAGE(ctl.WaitOutput("vol-tls RUNNING epoch=1", milliseconds(20'000)), ctl.output());
  const auto exit = ctl.Stop();
  REQUIRE_MESSAGE(exit.has_value(), ctl.output());
  CHECK(exit->ShellCode() == 0);
}

}  // namespace controller
