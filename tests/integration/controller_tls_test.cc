// The controller's side of mutual TLS against real share-managers: the
// client, the watch and the connector, then share-controller running TLS pods.
#include <doctest/doctest.h>

#include <filesystem>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "controller/grpc_share_connector.h"
#include "controller/share_client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/program_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace controller {
namespace {

using std::chrono::milliseconds;
using testing_support::Security;
using testing_support::ShareCerts;

}  // namespace

TEST_CASE("mTLS: ShareClient, StatusWatch and the connector against a TLS share-manager") {
  const ShareCerts certs;
  auto d = testing_support::DaemonProcess::Start(
      {.extra_flags = certs.DaemonFlags(), .wait_until_serving = false});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const ShareClientOptions tls{.deadline = milliseconds(2000),
                               .security = Security(certs.client, "share-manager")};

  // A fresh client per attempt while the daemon starts, as the connector
  // does after UNAVAILABLE: a channel refused early sits out gRPC's backoff.
  absl::StatusOr<sharemanager::v1::ShareStatus> status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  do {
    status = ShareClient((*d)->addr(), tls).GetStatus();
    if (status.ok() && status->state() == sharemanager::v1::SERVING) break;
    std::this_thread::sleep_for(milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
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
