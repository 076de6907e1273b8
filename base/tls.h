// Mutual TLS for the gRPC port, both sides, in one place: the flags (the same
// names on every binary), the PEM files they name checked once, and gRPC
// credentials that re-read those files as they change (a Kubernetes Secret
// rotated in place), plus the server's check of who the client is.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_context.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace base {

// The flags as typed.
struct TlsFlags {
  std::string cert, key, ca;
  std::string dir;  // a Secret's layout: DIR/tls.crt, DIR/tls.key, DIR/ca.crt
  std::string refresh_interval = "60s";
  std::string server_name;                   // clients only
  std::vector<std::string> allowed_clients;  // servers only
};

enum class TlsRole { kServer, kClient };

// --tls-cert, --tls-key, --tls-ca, --tls-dir, --tls-refresh-interval, and
// --tls-allowed-client (server) or --tls-server-name (client).
void AddTlsFlags(CLI::App& app, TlsFlags& flags, TlsRole role);

// The client side under other names, for a peer with a CA of its own (etcd):
// PREFIXcert, PREFIXkey, PREFIXca, PREFIXdir, PREFIXserver-name, e.g. "--etcd-".
// `peer` names the server in --help. The files are re-read at the default interval.
void AddClientTlsFlagsAs(CLI::App& app, TlsFlags& flags, const std::string& prefix,
                         const std::string& peer);
// Those flags again, to hand the same files to a child process (the paths
// made absolute: its working directory may differ); none without TLS.
std::vector<std::string> ClientTlsArgsAs(const TlsFlags& flags, const std::string& prefix);
// Whether any of the files or the server name is given.
bool AnyTlsFlag(const TlsFlags& flags);

struct TlsFiles {
  std::string cert, key, ca;
  // How often gRPC re-reads them (whole seconds: what its file watcher takes).
  std::chrono::seconds refresh{60};
};

// nullopt when no TLS flag is given. InvalidArgument, one line naming the
// flag, for a half configuration (a certificate without its key or CA,
// --tls-dir beside a file flag, a role's own flag without TLS) or a file that
// is unreadable, holds no PEM of its kind, or a key that is not the
// certificate's. Messages name the flags with `prefix` (AddClientTlsFlagsAs's).
absl::StatusOr<std::optional<TlsFiles>> ResolveTlsFiles(const TlsFlags& flags,
                                                        const std::string& prefix = "--tls-");

// Who the peer is, read from its certificate itself (the auth context's
// x509_pem_cert; none without it): its DNS subject alternative names, or its
// common name only when the certificate has no subjectAltName extension at
// all (IP, URI and e-mail SANs name no client, and do not let the CN in).
// Lowercased: DNS names compare case-insensitively (RFC 4343).
std::vector<std::string> PeerIdentities(const grpc::AuthContext& context);

// The server side: TLS only, a client certificate required and verified
// against `files.ca`, and every call on it refused (PERMISSION_DENIED, before
// any handler runs) unless PeerIdentities names one of `allowed_clients`
// (case-insensitively). Refusals are logged at most once per 30 s, with the
// count of those held back.
std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(
    const TlsFiles& files, const std::vector<std::string>& allowed_clients);

// What a client connects with: plaintext, or mTLS presenting `files.cert`
// and verifying the server against `files.ca` and a name.
struct ClientSecurity {
  std::shared_ptr<grpc::ChannelCredentials> tls;  // null: plaintext
  // The name the server's certificate must carry; empty: the target's host
  // (gRPC's own check; an IP target needs an IP SAN).
  std::string server_name;

  bool enabled() const { return tls != nullptr; }
  std::shared_ptr<grpc::ChannelCredentials> credentials() const;
  // Sets what the channel needs (the name to check) on `args`.
  void Apply(grpc::ChannelArguments& args) const;
};

// Credentials for `files` (nullopt: plaintext), shared by every channel the
// client opens (one file watcher, not one per channel).
ClientSecurity MakeClientSecurity(const std::optional<TlsFiles>& files,
                                  const std::string& server_name);

// ResolveTlsFiles plus --tls-server-name, into MakeClientSecurity.
absl::StatusOr<ClientSecurity> ResolveClientSecurity(const TlsFlags& flags,
                                                     const std::string& prefix = "--tls-");

}  // namespace base
