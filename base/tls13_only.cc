#include "base/tls13_only.h"

#include <openssl/bio.h>
#include <openssl/conf.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "absl/base/call_once.h"

namespace base {
namespace {

// OpenSSL's configuration language, loaded under its own application name
// (so no other section of /etc/ssl/openssl.cnf is touched). system_default
// applies to every SSL_CTX made afterwards. SECLEVEL=2, OpenSSL 3's default,
// is restated: a system_default of openssl.cnf that raised or lowered it is
// replaced by this one.
constexpr std::string_view kConfig = R"(sharemgr = sharemgr_init
[sharemgr_init]
ssl_conf = sharemgr_ssl
[sharemgr_ssl]
system_default = sharemgr_tls
[sharemgr_tls]
Protocol = -ALL, TLSv1.3
CipherString = DEFAULT:@SECLEVEL=2
)";

std::string OpenSslErrors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text.empty() ? "no OpenSSL error given" : text;
}

[[noreturn]] void Fail(std::string_view what) {
  spdlog::critical("cannot restrict TLS to version 1.3: {}: {}", what, OpenSslErrors());
  std::abort();
}

void Configure() {
  // The system configuration first, so that loading ours later cannot be
  // undone by OpenSSL's own lazy first-use initialisation.
  if (OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, nullptr) != 1) Fail("OpenSSL initialisation");
  // What the system configuration left in this thread's error queue is not
  // ours to report (and would be taken for a later call's error).
  ERR_clear_error();
  std::unique_ptr<CONF, decltype(&NCONF_free)> conf(NCONF_new(nullptr), &NCONF_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(kConfig.data(), static_cast<int>(kConfig.size())), &BIO_free);
  long error_line = 0;
  if (!conf || !bio || NCONF_load_bio(conf.get(), bio.get(), &error_line) != 1) {
    Fail("parsing the configuration");
  }
  if (CONF_modules_load(conf.get(), "sharemgr", 0) <= 0) Fail("loading the configuration");
  // Checked on a context as gRPC will make it, not assumed.
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> probe(SSL_CTX_new(TLS_method()), &SSL_CTX_free);
  if (!probe) Fail("making a context");
  SSL_CTX_set_min_proto_version(probe.get(), TLS1_2_VERSION);
  const uint64_t options = SSL_CTX_get_options(probe.get());
  if ((options & SSL_OP_NO_TLSv1_2) == 0) Fail("a new context still offers TLS 1.2");
  if ((options & SSL_OP_NO_TLSv1_3) != 0) Fail("a new context does not offer TLS 1.3");
}

}  // namespace

void OfferOnlyTls13() {
  static absl::once_flag once;
  absl::call_once(once, Configure);
}

}  // namespace base
