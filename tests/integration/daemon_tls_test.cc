// Mutual TLS on the gRPC port and the plaintext health port, against a real
// share-manager (and ganesha) over TCP on 127.0.0.1, with real certificates
// made by the openssl CLI for each test.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <thread>

#include "base/loopback_port.h"
#include "base/tls.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "sharemanager/v1/sharemanager.grpc.pb.h"
#include "tests/support/count_occurrences.h"
#include "tests/support/daemon_process.h"
#include "tests/support/program_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::DaemonSpec;
using testing_support::RunCommand;
using testing_support::Security;
using testing_support::ShareCerts;
using testing_support::ShareManagerBinary;
using testing_support::TempDir;
using testing_support::TestCert;

// A fresh channel per call: each test call is a new connection and handshake.
std::shared_ptr<grpc::Channel> Channel(const std::string& addr,
                                       const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                       grpc::ChannelArguments args = {}) {
  return grpc::CreateCustomChannel(addr, creds, args);
}

std::shared_ptr<grpc::Channel> Channel(const std::string& addr,
                                       const base::ClientSecurity& security) {
  grpc::ChannelArguments args;
  security.Apply(args);
  return Channel(addr, security.credentials(), args);
}

void Prepare(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + milliseconds(3000));
}

grpc::Status GetStatus(const std::shared_ptr<grpc::Channel>& channel,
                       v1::ShareStatus* status = nullptr) {
  grpc::ClientContext context;
  Prepare(context);
  v1::ShareStatus ignored;
  return v1::ShareManager::NewStub(channel)->GetStatus(&context, {}, status ? status : &ignored);
}

grpc::Status Unmount(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  Prepare(context);
  v1::UnmountResponse response;
  return v1::ShareManager::NewStub(channel)->Unmount(&context, {}, &response);
}

grpc::Status Mount(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  Prepare(context);
  v1::MountResponse response;
  return v1::ShareManager::NewStub(channel)->Mount(&context, {}, &response);
}

grpc::Status Health(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                    bool* serving = nullptr) {
  grpc::ClientContext context;
  Prepare(context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  auto status = grpc::health::v1::Health::NewStub(channel)->Check(&context, request, &response);
  if (serving) *serving = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  return status;
}

// How a health Watch stream ends (OK: it was served and ended by the deadline).
grpc::StatusCode HealthWatchEnd(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + milliseconds(1000));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("readiness");
  auto stream = grpc::health::v1::Health::NewStub(channel)->Watch(&context, request);
  grpc::health::v1::HealthCheckResponse response;
  while (stream->Read(&response)) {
  }
  return stream->Finish().error_code();
}

bool Eventually(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return done();
}

// A TLS daemon, SERVING as its plaintext health port says (what kubelet sees).
std::unique_ptr<DaemonProcess> StartTlsDaemon(const ShareCerts& certs,
                                              const std::vector<std::string>& more_flags = {}) {
  auto flags = certs.DaemonFlags();
  flags.insert(flags.end(), more_flags.begin(), more_flags.end());
  auto d = DaemonProcess::Start({.extra_flags = flags, .wait_until_serving = false});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const auto health = Channel((*d)->health_addr(), grpc::InsecureChannelCredentials());
  REQUIRE_MESSAGE(Eventually(
                      [&] {
                        bool serving = false;
                        return Health(health, "readiness", &serving).ok() && serving;
                      },
                      milliseconds(15'000)),
                  (*d)->output());
  return *std::move(d);
}

// The refused caller changed nothing: the export is still in place.
void CheckStillExported(const std::string& addr, const base::ClientSecurity& good) {
  v1::ShareStatus status;
  const auto rpc = GetStatus(Channel(addr, good), &status);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK(status.exported());
  CHECK(status.state() == v1::SERVING);
}

}  // namespace

TEST_CASE("mTLS: the allowed client is served, the TLS port never speaks plaintext") {
  const ShareCerts certs;
  auto d = StartTlsDaemon(certs);
  const auto good = Security(certs.client, "share-manager");

  v1::ShareStatus status;
  REQUIRE(GetStatus(Channel(d->addr(), good), &status).ok());
  CHECK(status.state() == v1::SERVING);
  bool serving = false;
  CHECK(Health(Channel(d->addr(), good), "liveness", &serving).ok());
  CHECK(serving);

  // Plaintext to the TLS port: no handshake, no call.
  const auto plaintext = Unmount(Channel(d->addr(), grpc::InsecureChannelCredentials()));
  CHECK(plaintext.error_code() == grpc::StatusCode::UNAVAILABLE);
  // The client checks the server's name: 127.0.0.1 is not in its certificate.
  const auto unnamed = GetStatus(Channel(d->addr(), Security(certs.client, "")));
  CHECK(unnamed.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(GetStatus(Channel(d->addr(), Security(certs.client, "someone-else"))).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  CheckStillExported(d->addr(), good);

  // The allowed client can change things.
  CHECK(Unmount(Channel(d->addr(), good)).ok());
  REQUIRE(GetStatus(Channel(d->addr(), good), &status).ok());
  CHECK_FALSE(status.exported());
  CHECK(Mount(Channel(d->addr(), good)).ok());
}

TEST_CASE(
    "mTLS: no certificate, another CA's, an expired one or a name not allowed: refused, "
    "nothing changed") {
  const ShareCerts certs;
  auto d = StartTlsDaemon(certs);
  const auto good = Security(certs.client, "share-manager");

  SUBCASE("no client certificate") {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("share-manager");
    auto ca = base::ReadFile(certs.ca.cert());
    REQUIRE(ca.ok());
    const auto rpc =
        Unmount(Channel(d->addr(), grpc::SslCredentials({.pem_root_certs = *ca}), args));
    CHECK(rpc.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  SUBCASE("a certificate from another CA, same name") {
    const auto foreign = certs.other_ca.Issue("foreign", "controller", {"DNS:controller"});
    // It trusts our CA for the server; only its own certificate is foreign.
    auto security = Security({.cert = foreign.cert, .key = foreign.key, .ca = certs.ca.cert()},
                             "share-manager");
    CHECK(Unmount(Channel(d->addr(), security)).error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  SUBCASE("an expired certificate of the right CA and name") {
    const auto expired = certs.ca.Issue("expired", "controller", {"DNS:controller"}, true);
    CHECK(Unmount(Channel(d->addr(), Security(expired, "share-manager"))).error_code() ==
          grpc::StatusCode::UNAVAILABLE);
  }
  SUBCASE("a name not in --tls-allowed-client") {
    const auto intruder = certs.ca.Issue("intruder", "intruder", {"DNS:intruder"});
    const auto security = Security(intruder, "share-manager");
    const auto rpc = Unmount(Channel(d->addr(), security));
    CHECK(rpc.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(rpc.error_message().find("'intruder'") != std::string::npos);
    // Every service on the port, health included: one check before any handler.
    CHECK(Health(Channel(d->addr(), security), "").error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
    CHECK(d->output().find("refused a call from client 'intruder'") != std::string::npos);
    // Refusals are logged once per 30 s, however many: a CA's certificate
    // must not be a way to flood the log.
    for (int i = 0; i < 5; ++i) {
      CHECK(GetStatus(Channel(d->addr(), security)).error_code() ==
            grpc::StatusCode::PERMISSION_DENIED);
    }
    CHECK(testing_support::CountOccurrences(d->output(), "refused a call from") == 1);
  }
  SUBCASE("the allowed name as CN, beside a DNS SAN that is not allowed: the SAN counts") {
    const auto mixed = certs.ca.Issue("mixed", "controller", {"DNS:intruder"});
    CHECK(Unmount(Channel(d->addr(), Security(mixed, "share-manager"))).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
  }
  SUBCASE("the allowed name as CN of a certificate without any SAN: allowed") {
    const auto cn_only = certs.ca.Issue("cn-only", "controller", {});
    CHECK(GetStatus(Channel(d->addr(), Security(cn_only, "share-manager"))).ok());
  }
  SUBCASE("names as DNS has them: a CN beside only an IP SAN is none, case is no difference") {
    const auto ip_only = certs.ca.Issue("ip-only", "controller", {"IP:127.0.0.1"});
    const auto rpc = Unmount(Channel(d->addr(), Security(ip_only, "share-manager")));
    CHECK(rpc.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    const auto upper = certs.ca.Issue("upper", "someone", {"DNS:CONTROLLER"});
    CHECK(GetStatus(Channel(d->addr(), Security(upper, "share-manager"))).ok());
  }
  CheckStillExported(d->addr(), good);
}

// openssl s_client's one-line summary of a handshake it tried at `version`
// ("tls1_2", "tls1_3") against `addr`, presenting the allowed client's certificate.
std::string HandshakeSummary(const ShareCerts& certs, const std::string& addr,
                             const std::string& version) {
  const auto result = RunCommand({"openssl", "s_client", "-" + version, "-connect", addr, "-cert",
                                  certs.client.cert, "-key", certs.client.key, "-CAfile",
                                  certs.ca.cert(), "-servername", "share-manager", "-alpn", "h2"});
  const auto line = result.output.find("New, ");
  return line == std::string::npos
             ? result.output
             : result.output.substr(line, result.output.find('\n', line) - line);
}

TEST_CASE("mTLS: TLS 1.3 only on both sides, the port refuses 1.2 and clients never offer it") {
  const ShareCerts certs;
  SUBCASE("the daemon's TLS port") {
    auto d = StartTlsDaemon(certs);
    CHECK(HandshakeSummary(certs, d->addr(), "tls1_3").find("New, TLSv1.3,") == 0);
    const auto tls12 = HandshakeSummary(certs, d->addr(), "tls1_2");
    CHECK_MESSAGE(tls12.find("New, (NONE), Cipher is (NONE)") == 0, tls12);
    CheckStillExported(d->addr(), Security(certs.client, "share-manager"));
  }
  SUBCASE("share-manager status as the client, against a server of one version") {
    // openssl s_server speaking one version with the share's server certificate;
    // it logs each handshake: the client's certificate when one completes.
    auto serve = [&](const std::string& version) {
      const auto port = std::to_string(base::FreeLoopbackPort());
      auto server = std::make_unique<testing_support::ProgramProcess>(std::vector<std::string>{
          "openssl", "s_server", "-www", "-" + version, "-alpn", "h2", "-accept",
          "127.0.0.1:" + port, "-cert", certs.server.cert, "-key", certs.server.key, "-CAfile",
          certs.ca.cert(), "-Verify", "1"});
      REQUIRE_MESSAGE(server->WaitOutput("ACCEPT", milliseconds(10'000)), server->output());
      const auto status =
          RunCommand({ShareManagerBinary(), "status", "--addr", "127.0.0.1:" + port, "--tls-dir",
                      certs.client_dir, "--tls-server-name", "share-manager"});
      CHECK(status.exit_code != 0);  // s_server is no gRPC server either way
      return server;
    };
    // The check can tell: at 1.3 the handshake completes (the client's certificate is verified).
    auto tls13 = serve("tls1_3");
    CHECK_MESSAGE(tls13->WaitOutput("depth=0 CN = controller", milliseconds(10'000)),
                  tls13->output());
    auto tls12 = serve("tls1_2");
    CHECK_MESSAGE(tls12->WaitOutput("unsupported protocol", milliseconds(10'000)), tls12->output());
    CHECK(tls12->output().find("CN = controller") == std::string::npos);
  }
}

TEST_CASE("mTLS: a rotated server certificate is served without a restart") {
  const ShareCerts certs;
  auto d = StartTlsDaemon(certs);
  const pid_t pid = d->pid();
  const auto expects_v2 = Security(certs.client, "share-manager-v2");
  CHECK(GetStatus(Channel(d->addr(), expects_v2)).error_code() == grpc::StatusCode::UNAVAILABLE);

  // As the kubelet updates a mounted Secret: new files, renamed into place.
  const auto v2 = certs.ca.Issue("server-v2", "share-manager", {"DNS:share-manager-v2"});
  testing_support::WriteSecretDir(certs.server_dir, v2);
  CHECK_MESSAGE(Eventually([&] { return GetStatus(Channel(d->addr(), expects_v2)).ok(); },
                           milliseconds(10'000)),
                d->output());
  // The old name is no longer served; same process throughout.
  CHECK(GetStatus(Channel(d->addr(), Security(certs.client, "share-manager"))).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  CHECK(d->pid() == pid);
  CHECK_FALSE(d->exited());
}

// A channel of its own connection: gRPC shares connections between channels
// of equal arguments and credentials, and a check of what a new handshake
// gets must not ride on one made earlier.
std::shared_ptr<grpc::Channel> NewConnection(const std::string& addr,
                                             const base::ClientSecurity& security) {
  grpc::ChannelArguments args;
  security.Apply(args);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return Channel(addr, security.credentials(), args);
}

TEST_CASE(
    "mTLS: a rotated CA bundle is used without a restart, and an established connection of a "
    "client it no longer trusts ends within the connection age") {
  const ShareCerts certs;
  // The connection age at its minimum (and so a 1 s grace): what ends a
  // connection admitted under the old CA.
  auto d = StartTlsDaemon(certs, {"--max-connection-age", "1s"});
  const pid_t pid = d->pid();
  const testing_support::TestCa new_ca(certs.dir.path(), "new");
  // Both clients check the server against the CA that signed its certificate.
  const auto old_client = Security(certs.client, "share-manager");
  const auto new_client_cert = new_ca.Issue("client-new", "controller", {"DNS:controller"});
  const auto new_client =
      Security({.cert = new_client_cert.cert, .key = new_client_cert.key, .ca = certs.ca.cert()},
               "share-manager");
  CHECK(GetStatus(NewConnection(d->addr(), new_client)).error_code() ==
        grpc::StatusCode::UNAVAILABLE);

  // The Secret's ca.crt becomes a bundle of the old and the new CA.
  const std::string bundle = certs.dir.path() + "/bundle.crt";
  const auto old_pem = base::ReadFile(certs.ca.cert());
  const auto new_pem = base::ReadFile(new_ca.cert());
  REQUIRE((old_pem.ok() && new_pem.ok()));
  REQUIRE(base::WriteFileAtomically(bundle, *old_pem + *new_pem, 0600, base::Durability::kReplaced)
              .ok());
  testing_support::WriteSecretDir(
      certs.server_dir, {.cert = certs.server.cert, .key = certs.server.key, .ca = bundle});
  CHECK_MESSAGE(
      testing_support::WaitFor([&] { return GetStatus(NewConnection(d->addr(), new_client)).ok(); },
                               milliseconds(15'000)),
      d->output());
  CHECK(GetStatus(NewConnection(d->addr(), old_client)).ok());

  // An old-CA client's channel, connected while both CAs are trusted.
  const auto established = Channel(d->addr(), old_client);
  REQUIRE(GetStatus(established).ok());

  // Then the new CA alone.
  testing_support::WriteSecretDir(
      certs.server_dir, {.cert = certs.server.cert, .key = certs.server.key, .ca = new_ca.cert()});
  CHECK_MESSAGE(testing_support::WaitFor(
                    [&] {
                      return GetStatus(NewConnection(d->addr(), old_client)).error_code() ==
                             grpc::StatusCode::UNAVAILABLE;
                    },
                    milliseconds(15'000)),
                d->output());
  CHECK(GetStatus(NewConnection(d->addr(), new_client)).ok());
  // The established channel loses its connection at its age (plus the grace)
  // and its reconnect is refused: calls on it fail from then on.
  CHECK(testing_support::WaitFor(
      [&] { return GetStatus(established).error_code() == grpc::StatusCode::UNAVAILABLE; },
      milliseconds(15'000)));
  CHECK(testing_support::HoldsFor(
      [&] { return GetStatus(established).error_code() == grpc::StatusCode::UNAVAILABLE; },
      milliseconds(3000)));
  CheckStillExported(d->addr(), new_client);
  CHECK(d->pid() == pid);
  CHECK_FALSE(d->exited());
}

TEST_CASE("the health port: plaintext grpc.health.v1 for kubelet, nothing else") {
  const ShareCerts certs;
  SUBCASE("beside a TLS port") {
    auto d = StartTlsDaemon(certs);
    const auto health = Channel(d->health_addr(), grpc::InsecureChannelCredentials());
    for (const std::string service : {"", "readiness", "liveness"}) {
      bool serving = false;
      CHECK(Health(health, service, &serving).ok());
      CHECK(serving);
    }
    CHECK(Mount(health).error_code() == grpc::StatusCode::UNIMPLEMENTED);
    CHECK(Unmount(health).error_code() == grpc::StatusCode::UNIMPLEMENTED);
    CHECK(GetStatus(health).error_code() == grpc::StatusCode::UNIMPLEMENTED);
    // No stream anyone could hold open: Watch is for the API port's callers.
    CHECK(HealthWatchEnd(health) == grpc::StatusCode::UNIMPLEMENTED);
    CheckStillExported(d->addr(), Security(certs.client, "share-manager"));
    // It follows the share: readiness drops with the export.
    CHECK(Unmount(Channel(d->addr(), Security(certs.client, "share-manager"))).ok());
    CHECK(Eventually(
        [&] {
          bool serving = true;
          return Health(health, "readiness", &serving).ok() && !serving;
        },
        milliseconds(5000)));
  }
  SUBCASE("beside a plaintext port (the default)") {
    auto d = DaemonProcess::Start();
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    const auto health = Channel((*d)->health_addr(), grpc::InsecureChannelCredentials());
    bool serving = false;
    CHECK(Health(health, "readiness", &serving).ok());
    CHECK(serving);
    CHECK(Mount(health).error_code() == grpc::StatusCode::UNIMPLEMENTED);
    CHECK(HealthWatchEnd(health) == grpc::StatusCode::UNIMPLEMENTED);
    // The API port still serves it (the controller and the watch command use it).
    CHECK(HealthWatchEnd(Channel((*d)->addr(), grpc::InsecureChannelCredentials())) ==
          grpc::StatusCode::DEADLINE_EXCEEDED);
    const auto probe = RunCommand(
        {ShareManagerBinary(), "probe", "--addr", (*d)->health_addr(), "--service", "liveness"});
    CHECK_MESSAGE(probe.exit_code == 0, probe.output);
  }
}

TEST_CASE("share-manager status/mount/unmount/probe --tls-dir against a TLS daemon") {
  const ShareCerts certs;
  auto d = StartTlsDaemon(certs);
  const std::vector<std::string> tls = {"--tls-dir", certs.client_dir, "--tls-server-name",
                                        "share-manager"};
  auto run = [&](std::vector<std::string> args, const std::vector<std::string>& extra) {
    args.insert(args.begin(), ShareManagerBinary());
    args.insert(args.end(), {"--addr", d->addr()});
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCommand(args);
  };
  const auto status = run({"status"}, tls);
  CHECK_MESSAGE(status.exit_code == 0, status.output);
  CHECK(status.output.find("SERVING") != std::string::npos);
  const auto probe = run({"probe", "--service", "readiness"}, tls);
  CHECK_MESSAGE(probe.exit_code == 0, probe.output);
  const auto unmount = run({"unmount"}, tls);
  CHECK_MESSAGE(unmount.exit_code == 0, unmount.output);
  const auto mount = run({"mount"}, tls);
  CHECK_MESSAGE(mount.exit_code == 0, mount.output);

  // Without TLS flags: unreachable, and it says what to pass.
  const auto plaintext = run({"status"}, {});
  CHECK(plaintext.exit_code == 2);
  CHECK_MESSAGE(plaintext.output.find("pass --tls-dir") != std::string::npos, plaintext.output);
  // Half a configuration is a bad argument, said in one line.
  const auto half = run({"status"}, {"--tls-cert", certs.client.cert});
  CHECK(half.exit_code == 1);
  CHECK(half.output ==
        "share-manager: TLS needs --tls-cert, --tls-key and --tls-ca together (or "
        "--tls-dir); missing --tls-key\n");
  // The watch command too, until the server stops.
  testing_support::ProgramProcess watch({ShareManagerBinary(), "watch", "--addr", d->addr(),
                                         "--tls-dir", certs.client_dir, "--tls-server-name",
                                         "share-manager"});
  CHECK_MESSAGE(watch.WaitOutput("SERVING", milliseconds(5000)), watch.output());
}

TEST_CASE(
    "the watch command carries on when the server ends its connection at its maximum age, "
    "printing each status once") {
  const ShareCerts certs;
  auto d = StartTlsDaemon(certs, {"--max-connection-age", "1s"});  // and so a 1 s grace
  testing_support::ProgramProcess watch({ShareManagerBinary(), "watch", "--addr", d->addr(),
                                         "--tls-dir", certs.client_dir, "--tls-server-name",
                                         "share-manager"});
  REQUIRE_MESSAGE(watch.WaitOutput("exported=yes", milliseconds(5000)), watch.output());
  // Long enough for its connection to be ended at least once.
  CHECK_FALSE(watch.WaitExit(milliseconds(3500)).has_value());
  CHECK(Unmount(Channel(d->addr(), Security(certs.client, "share-manager"))).ok());
  CHECK_MESSAGE(watch.WaitOutput("exported=no", milliseconds(5000)), watch.output());
  // A stream opened again starts with the current status: not printed twice.
  CHECK_MESSAGE(testing_support::CountOccurrences(watch.output(), "exported=yes") == 1,
                watch.output());
  d->Signal(SIGTERM);
  const auto exit = watch.WaitExit(milliseconds(15'000));
  REQUIRE_MESSAGE(exit.has_value(), watch.output());
  CHECK(exit->ShellCode() == 0);
}

TEST_CASE("the daemon refuses half-configured TLS with exit 2 and one line, starting nothing") {
  const ShareCerts certs;
  const TempDir dir("sharemgr-tls-flags");
  auto daemon = [&](const std::vector<std::string>& tls) {
    std::vector<std::string> argv = {ShareManagerBinary(), "daemon",
                                     "--volume",           "pvc-tls",
                                     "--export-dir",       dir.path() + "/export",
                                     "--state-dir",        dir.path() + "/state",
                                     "--nfs-address",      "127.0.0.1",
                                     "--nfs-port",         "1",
                                     "--listen",           "127.0.0.1:1",
                                     "--health-listen",    "none"};
    argv.insert(argv.end(), tls.begin(), tls.end());
    return RunCommand(argv, milliseconds(10'000));
  };
  const auto no_key = daemon({"--tls-cert", certs.server.cert, "--tls-ca", certs.ca.cert(),
                              "--tls-allowed-client", "controller"});
  CHECK(no_key.exit_code == 2);
  CHECK(no_key.output ==
        "share-manager: TLS needs --tls-cert, --tls-key and --tls-ca together "
        "(or --tls-dir); missing --tls-key\n");
  const auto nobody_allowed = daemon({"--tls-dir", certs.server_dir});
  CHECK(nobody_allowed.exit_code == 2);
  CHECK(nobody_allowed.output.find("TLS needs --tls-allowed-client NAME") != std::string::npos);
  const auto allowed_without_tls = daemon({"--tls-allowed-client", "controller"});
  CHECK(allowed_without_tls.exit_code == 2);
  CHECK(allowed_without_tls.output.find("--tls-allowed-client needs TLS") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/state"));
}
