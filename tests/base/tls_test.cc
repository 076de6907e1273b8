#include "base/tls.h"

#include <doctest/doctest.h>

#include <map>

#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace base {
namespace {

using testing_support::TempDir;
using testing_support::TestCa;
using testing_support::TestCert;

// An auth context holding only the properties a test gives it.
class FakeAuthContext : public grpc::AuthContext {
 public:
  explicit FakeAuthContext(std::multimap<std::string, std::string> properties)
      : properties_(std::move(properties)) {}
  bool IsPeerAuthenticated() const override { return true; }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(const std::string& name) const override {
    std::vector<grpc::string_ref> values;
    auto [first, last] = properties_.equal_range(name);
    for (auto it = first; it != last; ++it) values.emplace_back(it->second);
    return values;
  }
  grpc::AuthPropertyIterator begin() const override { return Empty(); }
  grpc::AuthPropertyIterator end() const override { return Empty(); }
  void AddProperty(const std::string&, const grpc::string_ref&) override {}
  bool SetPeerIdentityPropertyName(const std::string&) override { return false; }

 private:
  struct Empty : grpc::AuthPropertyIterator {};
  std::multimap<std::string, std::string> properties_;
};

std::string ErrorOf(const TlsFlags& flags) {
  auto files = ResolveTlsFiles(flags);
  return files.ok() ? "" : std::string(files.status().message());
}

}  // namespace

TEST_CASE(
    "a client's identity, from its real certificate: its DNS SANs, its CN only without any SAN, "
    "lowercased") {
  const TempDir dir("tls-identity");
  const TestCa ca(dir.path(), "ca");
  // The auth context gRPC builds for a TLS peer carries its certificate; the
  // other properties (peer_dns, x509_common_name, ...) are not what counts.
  auto identities = [&](const std::string& stem, const std::string& cn,
                        const std::vector<std::string>& sans) {
    const auto pem = ReadFile(ca.Issue(stem, cn, sans).cert);
    REQUIRE(pem.ok());
    return PeerIdentities(FakeAuthContext(
        {{GRPC_X509_PEM_CERT_PROPERTY_NAME, *pem}, {GRPC_X509_CN_PROPERTY_NAME, cn}}));
  };
  using Names = std::vector<std::string>;
  CHECK(identities("dns", "admin", {"DNS:controller", "DNS:ctl.example"}) ==
        Names{"controller", "ctl.example"});
  // RFC 4343: a DNS name's case means nothing.
  CHECK(identities("upper", "admin", {"DNS:Controller.EXAMPLE"}) == Names{"controller.example"});
  // No subjectAltName extension at all: the CN names the client.
  CHECK(identities("cn-only", "Controller", {}) == Names{"controller"});
  // SANs but none of them DNS: no name, the CN does not count either.
  CHECK(identities("ip-only", "controller", {"IP:10.0.0.1"}).empty());
  CHECK(identities("uri-only", "controller", {"URI:spiffe://cluster/ns/controller"}).empty());
  // No certificate in the context: nobody, whatever else it says.
  CHECK(PeerIdentities(FakeAuthContext({{GRPC_PEER_DNS_PROPERTY_NAME, "controller"},
                                        {GRPC_X509_CN_PROPERTY_NAME, "controller"}}))
            .empty());
}

TEST_CASE("TLS flags: none is plaintext, half a configuration or a bad file is one clear error") {
  const TempDir dir("sharemgr-tls");
  const TestCa ca(dir.path(), "ca");
  const TestCert good = ca.Issue("good", "share-manager", {"DNS:share-manager"});
  const TestCert other = ca.Issue("other", "other", {"DNS:other"});
  const std::string secret = testing_support::WriteSecretDir(dir.path() + "/secret", good);

  auto none = ResolveTlsFiles({});
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());

  auto files = ResolveTlsFiles({.cert = good.cert, .key = good.key, .ca = good.ca});
  REQUIRE_MESSAGE(files.ok(), files.status().ToString());
  REQUIRE(files->has_value());
  CHECK((*files)->refresh == std::chrono::seconds(60));
  auto from_dir = ResolveTlsFiles({.dir = secret, .refresh_interval = "1500ms"});
  REQUIRE_MESSAGE(from_dir.ok(), from_dir.status().ToString());
  CHECK((*from_dir)->cert == secret + "/tls.crt");
  CHECK((*from_dir)->key == secret + "/tls.key");
  CHECK((*from_dir)->ca == secret + "/ca.crt");
  CHECK((*from_dir)->refresh == std::chrono::seconds(2));

  CHECK(ErrorOf({.cert = good.cert, .ca = good.ca}).find("missing --tls-key") != std::string::npos);
  CHECK(ErrorOf({.cert = good.cert, .key = good.key}).find("missing --tls-ca") !=
        std::string::npos);
  CHECK(ErrorOf({.key = good.key}).find("missing --tls-cert") != std::string::npos);
  CHECK(ErrorOf({.cert = good.cert, .dir = secret}).find("--tls-dir replaces") !=
        std::string::npos);
  CHECK(ErrorOf({.allowed_clients = {"controller"}}).find("--tls-allowed-client needs TLS") !=
        std::string::npos);
  CHECK(ErrorOf({.server_name = "share-manager"}).find("--tls-server-name needs TLS") !=
        std::string::npos);
  CHECK(ErrorOf({.dir = secret, .refresh_interval = "500ms"}).find("at least 1s") !=
        std::string::npos);
  CHECK(ErrorOf({.cert = good.cert, .key = other.key, .ca = good.ca})
            .find("is not the private key of --tls-cert") != std::string::npos);
  CHECK(ErrorOf({.cert = good.key, .key = good.key, .ca = good.ca})
            .find("holds no PEM certificate") != std::string::npos);
  CHECK(ErrorOf({.cert = good.cert, .key = good.cert, .ca = good.ca})
            .find("holds no PEM private key") != std::string::npos);
  CHECK(ErrorOf({.dir = dir.path() + "/missing"})
            .find("--tls-dir " + dir.path() + "/missing/tls.crt") != std::string::npos);
}

}  // namespace base
