#include "base/tls.h"

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <string_view>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/clock.h"
#include "base/files.h"
#include "base/log_limiter.h"
#include "base/tls13_only.h"

namespace base {
namespace {

template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;

// Reads `pem` in place: it must outlive the BIO.
BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// `what` names the flag and the file in every message.
absl::StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  auto pem = ReadFile(path);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", pem.status().message()));
  }
  return pem;
}

absl::StatusOr<X509Ptr> FirstCertificate(const std::string& what, const std::string& pem) {
  auto bio = MemoryBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return absl::InvalidArgumentError(absl::StrCat(what, " holds no PEM certificate"));
  return cert;
}

// Read once here so a bad file is one clear line at start; gRPC's watcher
// would only log and fail every handshake.
absl::Status CheckFiles(const TlsFiles& files, const std::string& cert_flag,
                        const std::string& key_flag, const std::string& ca_flag) {
  const auto cert_what = absl::StrCat(cert_flag, " ", files.cert);
  const auto key_what = absl::StrCat(key_flag, " ", files.key);
  const auto ca_what = absl::StrCat(ca_flag, " ", files.ca);
  auto cert_pem = ReadPem(cert_what, files.cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadPem(key_what, files.key);
  if (!key_pem.ok()) return key_pem.status();
  auto ca_pem = ReadPem(ca_what, files.ca);
  if (!ca_pem.ok()) return ca_pem.status();
  auto cert = FirstCertificate(cert_what, *cert_pem);
  if (!cert.ok()) return cert.status();
  if (auto ca = FirstCertificate(ca_what, *ca_pem); !ca.ok()) return ca.status();
  auto bio = MemoryBio(*key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return absl::InvalidArgumentError(absl::StrCat(key_what, " holds no PEM private key"));
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(key_what, " is not the private key of ", cert_what));
  }
  return absl::OkStatus();
}

// DNS names compare case-insensitively (RFC 4343): both sides are lowercased.
std::string DnsName(std::string_view name) { return absl::AsciiStrToLower(std::string(name)); }

std::vector<std::string> DnsNames(const std::vector<std::string>& names) {
  std::vector<std::string> lower;
  for (const auto& name : names) lower.push_back(DnsName(name));
  return lower;
}

// The DNS names of a subjectAltName extension (none when it cannot be read).
std::vector<std::string> DnsSans(X509* cert) {
  std::vector<std::string> names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans == nullptr) return names;
  for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans, i);
    if (san->type != GEN_DNS) continue;
    const std::string_view name(
        reinterpret_cast<const char*>(ASN1_STRING_get0_data(san->d.dNSName)),
        static_cast<size_t>(ASN1_STRING_length(san->d.dNSName)));
    if (name.find('\0') == std::string_view::npos) names.push_back(DnsName(name));
  }
  GENERAL_NAMES_free(sans);
  return names;
}

std::vector<std::string> CommonNames(X509* cert) {
  std::vector<std::string> names;
  const X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) {
    unsigned char* utf8 = nullptr;
    const int len =
        ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
    if (len < 0) continue;
    const std::string_view name(reinterpret_cast<const char*>(utf8), static_cast<size_t>(len));
    if (name.find('\0') == std::string_view::npos) names.push_back(DnsName(name));
    OPENSSL_free(utf8);
  }
  return names;
}

// Every call on the TLS port passes here before any handler: one place no
// new service can bypass.
class AllowedClients final : public grpc::AuthMetadataProcessor {
 public:
  explicit AllowedClients(const std::vector<std::string>& allowed)
      : allowed_(DnsNames(allowed)), refusal_log_(kRefusalLogPeriod) {}

  // Reads the connection's auth context only: no need for gRPC's thread hop.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& /*auth_metadata*/, grpc::AuthContext* context,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    const auto names = PeerIdentities(*context);
    for (const auto& name : names) {
      if (std::find(allowed_.begin(), allowed_.end(), name) != allowed_.end()) {
        return grpc::Status::OK;
      }
    }
    const std::string who =
        names.empty() ? "a client certificate naming no client (no DNS SAN, and a CN only "
                        "counts without any SAN)"
                      : absl::StrCat("client '", absl::StrJoin(names, "', '"), "'");
    // Whoever holds a certificate of the CA may call as often as it likes:
    // its refusals must not flood the log.
    if (auto held_back = refusal_log_.Admit()) {
      spdlog::warn("refused a call from {}: not in --tls-allowed-client{}", who,
                   LogLimiter::HeldBack(*held_back));
    }
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(who, " is not allowed (--tls-allowed-client)"));
  }

 private:
  static constexpr Duration kRefusalLogPeriod{30'000};
  const std::vector<std::string> allowed_;  // lowercased
  LogLimiter refusal_log_;
};

std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> Watcher(const TlsFiles& files) {
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca, static_cast<unsigned>(files.refresh.count()));
}

}  // namespace

void AddTlsFlags(CLI::App& app, TlsFlags& f, TlsRole role) {
  const bool server = role == TlsRole::kServer;
  app.add_option("--tls-cert", f.cert,
                 server ? "PEM certificate (chain) the TLS port presents; with --tls-key and "
                          "--tls-ca the --listen port serves mutual TLS only"
                        : "PEM client certificate (chain) presented to the share-manager (mTLS)");
  app.add_option("--tls-key", f.key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", f.ca,
                 server ? "PEM CA certificate(s) client certificates must chain to"
                        : "PEM CA certificate(s) the share-manager's certificate must chain to");
  app.add_option("--tls-dir", f.dir,
                 "Directory in a Kubernetes TLS Secret's layout: tls.crt, tls.key, ca.crt (instead "
                 "of --tls-cert/--tls-key/--tls-ca)");
  app.add_option("--tls-refresh-interval", f.refresh_interval,
                 "How often the TLS files are re-read, so a rotated certificate is used without "
                 "a restart (whole seconds, at least 1s)")
      ->capture_default_str();
  if (server) {
    app.add_option("--tls-allowed-client", f.allowed_clients,
                   "Client identity (its certificate's DNS SAN, or its CN when it has no SAN at "
                   "all; case-insensitive) allowed to call; repeatable, required with TLS")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  } else {
    app.add_option("--tls-server-name", f.server_name,
                   "Name the share-manager's certificate must carry (DNS SAN); default: the "
                   "host of the address");
  }
}

void AddClientTlsFlagsAs(CLI::App& app, TlsFlags& f, const std::string& prefix,
                         const std::string& peer) {
  app.add_option(prefix + "cert", f.cert,
                 absl::StrCat("PEM client certificate presented to ", peer, " (with ", prefix,
                              "key, ", prefix, "ca: mTLS)"));
  app.add_option(prefix + "key", f.key, absl::StrCat("PEM private key of ", prefix, "cert"));
  app.add_option(prefix + "ca", f.ca,
                 absl::StrCat("PEM CA certificate(s) ", peer, "'s certificate chains to"));
  app.add_option(prefix + "dir", f.dir,
                 absl::StrCat("Directory in a Kubernetes TLS Secret's layout: tls.crt, tls.key, "
                              "ca.crt (instead of ",
                              prefix, "cert/", prefix, "key/", prefix, "ca)"));
  app.add_option(
      prefix + "server-name", f.server_name,
      absl::StrCat("Name ", peer,
                   "'s certificate must carry (DNS SAN); default: each endpoint's host"));
}

std::vector<std::string> ClientTlsArgsAs(const TlsFlags& f, const std::string& prefix) {
  std::vector<std::string> args;
  for (const auto& [name, value, path] :
       {std::tuple{"cert", &f.cert, true}, std::tuple{"key", &f.key, true},
        std::tuple{"ca", &f.ca, true}, std::tuple{"dir", &f.dir, true},
        std::tuple{"server-name", &f.server_name, false}}) {
    if (value->empty()) continue;
    args.push_back(prefix + name);
    args.push_back(path ? std::filesystem::absolute(*value).lexically_normal().string() : *value);
  }
  return args;
}

bool AnyTlsFlag(const TlsFlags& f) {
  return !f.cert.empty() || !f.key.empty() || !f.ca.empty() || !f.dir.empty() ||
         !f.server_name.empty();
}

namespace {

absl::StatusOr<std::optional<TlsFiles>> ResolveTlsFilesNamedTls(const TlsFlags& f) {
  const bool any_file = !f.cert.empty() || !f.key.empty() || !f.ca.empty();
  if (!any_file && f.dir.empty()) {
    if (!f.allowed_clients.empty()) {
      return absl::InvalidArgumentError("--tls-allowed-client needs TLS (--tls-dir or --tls-cert)");
    }
    if (!f.server_name.empty()) {
      return absl::InvalidArgumentError("--tls-server-name needs TLS (--tls-dir or --tls-cert)");
    }
    return std::nullopt;
  }
  if (any_file && !f.dir.empty()) {
    return absl::InvalidArgumentError(
        "--tls-dir replaces --tls-cert, --tls-key and --tls-ca: give one or the others");
  }
  if (any_file && (f.cert.empty() || f.key.empty() || f.ca.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS needs --tls-cert, --tls-key and --tls-ca together (or --tls-dir); missing ",
        f.cert.empty() ? "--tls-cert" : (f.key.empty() ? "--tls-key" : "--tls-ca")));
  }
  auto refresh = ParseFlagDuration("--tls-refresh-interval", f.refresh_interval, Duration(1000));
  if (!refresh.ok()) return refresh.status();
  TlsFiles files;
  // gRPC's watcher takes whole seconds.
  files.refresh = std::chrono::ceil<std::chrono::seconds>(*refresh);
  if (!f.dir.empty()) {
    files.cert = f.dir + "/tls.crt";
    files.key = f.dir + "/tls.key";
    files.ca = f.dir + "/ca.crt";
    if (auto s = CheckFiles(files, "--tls-dir", "--tls-dir", "--tls-dir"); !s.ok()) return s;
  } else {
    files.cert = f.cert;
    files.key = f.key;
    files.ca = f.ca;
    if (auto s = CheckFiles(files, "--tls-cert", "--tls-key", "--tls-ca"); !s.ok()) return s;
  }
  return files;
}

}  // namespace

absl::StatusOr<std::optional<TlsFiles>> ResolveTlsFiles(const TlsFlags& flags,
                                                        const std::string& prefix) {
  auto files = ResolveTlsFilesNamedTls(flags);
  if (files.ok() || prefix == "--tls-") return files;
  // One spelling of every check above; the flags' own names in the message.
  return absl::InvalidArgumentError(
      absl::StrReplaceAll(files.status().message(), {{"--tls-", prefix}}));
}

std::vector<std::string> PeerIdentities(const grpc::AuthContext& context) {
  const auto pems = context.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pems.size() != 1) return {};
  const std::string pem(pems[0].data(), pems[0].size());
  auto bio = MemoryBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return {};
  // A certificate with any subjectAltName is named by its SANs alone
  // (RFC 6125 6.4.4): an IP or URI SAN beside a CN does not make the CN count.
  if (X509_get_ext_by_NID(cert.get(), NID_subject_alt_name, -1) >= 0) return DnsSans(cert.get());
  return CommonNames(cert.get());
}

std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(
    const TlsFiles& files, const std::vector<std::string>& allowed_clients) {
  OfferOnlyTls13();  // before gRPC makes an OpenSSL context for this port
  grpc::experimental::TlsServerCredentialsOptions options(Watcher(files));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  auto credentials = grpc::experimental::TlsServerCredentials(options);
  credentials->SetAuthMetadataProcessor(std::make_shared<AllowedClients>(allowed_clients));
  return credentials;
}

std::shared_ptr<grpc::ChannelCredentials> ClientSecurity::credentials() const {
  return tls ? tls : grpc::InsecureChannelCredentials();
}

void ClientSecurity::Apply(grpc::ChannelArguments& args) const {
  if (tls && !server_name.empty()) args.SetSslTargetNameOverride(server_name);
}

ClientSecurity MakeClientSecurity(const std::optional<TlsFiles>& files,
                                  const std::string& server_name) {
  if (!files) return ClientSecurity{};
  OfferOnlyTls13();  // before gRPC makes an OpenSSL context for this client
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Watcher(*files));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  // Explicit, whatever gRPC's default: the server's certificate must name the
  // target (or --tls-server-name).
  options.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return ClientSecurity{.tls = grpc::experimental::TlsCredentials(options),
                        .server_name = server_name};
}

absl::StatusOr<ClientSecurity> ResolveClientSecurity(const TlsFlags& flags,
                                                     const std::string& prefix) {
  auto files = ResolveTlsFiles(flags, prefix);
  if (!files.ok()) return files.status();
  return MakeClientSecurity(*files, flags.server_name);
}

}  // namespace base
