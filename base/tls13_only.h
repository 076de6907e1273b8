// TLS 1.3 as the only version this process offers or accepts.
//
// gRPC 1.51 (Debian 12) has no public way to set a minimum TLS version (it
// arrives with gRPC 1.53), and the version gRPC sets on each OpenSSL context
// (SSL_CTX_set_min_proto_version, TLS 1.2) overrides OpenSSL's MinProtocol.
// OpenSSL's "Protocol" setting is kept apart from that: it sets
// SSL_OP_NO_TLSv1_2 (and older) on every context as it is created, and gRPC
// never clears it. So the process's OpenSSL configuration is replaced with
// one that offers TLS 1.3 alone (and keeps Debian's security level 2).
#pragma once

namespace base {

// For the whole process: every OpenSSL context made afterwards, gRPC's or
// anyone's (a library user's own HTTPS clients too), speaks TLS 1.3 only, and
// an operator's own system_default settings in openssl.cnf are replaced.
// Call it at the top of main(), before any thread starts: OpenSSL swaps its
// configuration in place, which a context being made at that moment on
// another thread could read half-swapped. Later calls do nothing (every
// credential builder in base/tls.cc calls it too, for a program that did
// not). Aborts, with a critical log, when OpenSSL refuses the setting:
// serving TLS 1.2 where 1.3 only is promised is worse than not starting.
void OfferOnlyTls13();

}  // namespace base
