// Real certificates for TLS tests, made with the openssl CLI in the test's own
// directory: a CA, and keys and certificates it signs with chosen names,
// valid or already expired. EC P-256 keys: quick to make.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/tls.h"
#include "supervisor/run_program.h"
#include "tests/support/temp_dir.h"

namespace testing_support {

struct TestCert {
  std::string cert, key, ca;  // the CA that signed it
};

class TestCa {
 public:
  // Makes DIR/NAME-ca.key and DIR/NAME-ca.crt (self-signed, CN = NAME).
  TestCa(std::string dir, const std::string& name) : dir_(std::move(dir)) {
    key_ = absl::StrCat(dir_, "/", name, "-ca.key");
    cert_ = absl::StrCat(dir_, "/", name, "-ca.crt");
    Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key_, "-out", cert_, "-days", "30", "-subj", "/CN=" + name});
  }

  const std::string& cert() const { return cert_; }

  // A key and a certificate for `cn` with `sans` ("DNS:name", "IP:127.0.0.1";
  // none: no SAN extension at all), in DIR/STEM.{key,crt}, with a serial no
  // other certificate of the test has. `expired`: its notAfter is yesterday
  // (openssl 3.0's x509 takes -days -1; notBefore stays now).
  TestCert Issue(const std::string& stem, const std::string& cn,
                 const std::vector<std::string>& sans, bool expired = false) const {
    const std::string key = absl::StrCat(dir_, "/", stem, ".key");
    const std::string csr = absl::StrCat(dir_, "/", stem, ".csr");
    const std::string crt = absl::StrCat(dir_, "/", stem, ".crt");
    const std::string ext = absl::StrCat(dir_, "/", stem, ".ext");
    Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
             key, "-out", csr, "-subj", "/CN=" + cn});
    std::string extensions = "extendedKeyUsage=serverAuth,clientAuth\n";
    if (!sans.empty())
      absl::StrAppend(&extensions, "subjectAltName=", absl::StrJoin(sans, ","), "\n");
    REQUIRE(base::WriteFileAtomically(ext, extensions, 0600, base::Durability::kReplaced).ok());
    static std::atomic<int> serial{1000};
    Openssl({"x509", "-req", "-in", csr, "-CA", cert_, "-CAkey", key_, "-out", crt, "-days",
             expired ? "-1" : "30", "-set_serial", std::to_string(serial++), "-extfile", ext});
    return {.cert = crt, .key = key, .ca = cert_};
  }

 private:
  static void Openssl(std::vector<std::string> args) {
    args.insert(args.begin(), "openssl");
    const auto result = supervisor::RunProgram(args, std::chrono::milliseconds(30'000));
    REQUIRE_MESSAGE(result.exit_code == 0,
                    absl::StrCat(absl::StrJoin(args, " "), ": ", result.output));
  }

  std::string dir_, key_, cert_;
};

// `cert` laid out as a Kubernetes TLS Secret mounts it (tls.crt, tls.key,
// ca.crt) in DIR, each file replaced by a rename, as the kubelet swaps a
// Secret: a reader never sees half a file. Returns DIR.
inline std::string WriteSecretDir(const std::string& dir, const TestCert& cert) {
  std::filesystem::create_directories(dir);
  for (const auto& [from, to] : {std::pair{cert.key, "tls.key"}, std::pair{cert.cert, "tls.crt"},
                                 std::pair{cert.ca, "ca.crt"}}) {
    auto content = base::ReadFile(from);
    REQUIRE(content.ok());
    REQUIRE(base::WriteFileAtomically(dir + "/" + to, *content, 0600, base::Durability::kReplaced)
                .ok());
  }
  return dir;
}

// One share-manager's mTLS world: a CA; the server's certificate names
// "share-manager" only (no IP SAN, so clients ask for that name); the client
// allowed to call is "controller"; both also as Secret directories. Another
// CA stands by for foreign certificates.
struct ShareCerts {
  ShareCerts()
      : dir("sharemgr-tls"),
        ca(dir.path(), "ca"),
        other_ca(dir.path(), "other"),
        server(ca.Issue("server", "share-manager", {"DNS:share-manager"})),
        client(ca.Issue("client", "controller", {"DNS:controller"})),
        server_dir(WriteSecretDir(dir.path() + "/server", server)),
        client_dir(WriteSecretDir(dir.path() + "/client", client)) {}

  // The daemon's TLS flags: the server's Secret, "controller" allowed, files
  // re-read every second.
  std::vector<std::string> DaemonFlags() const {
    return {"--tls-dir", server_dir, "--tls-allowed-client", "controller", "--tls-refresh-interval",
            "1s"};
  }

  TempDir dir;
  TestCa ca, other_ca;
  TestCert server, client;
  std::string server_dir, client_dir;
};

// A client presenting `cert`, expecting the server to be `server_name`.
inline base::ClientSecurity Security(const TestCert& cert, const std::string& server_name) {
  auto security = base::ResolveClientSecurity(
      {.cert = cert.cert, .key = cert.key, .ca = cert.ca, .server_name = server_name});
  REQUIRE_MESSAGE(security.ok(), security.status().ToString());
  return *security;
}

}  // namespace testing_support
