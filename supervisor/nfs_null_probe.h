// "Is ganesha serving?" as the cheapest real NFS request: an ONC RPC NULL call
// (RFC 5531; program 100003 NFS, version 4, procedure 0) over TCP with a deadline.
// A connect alone proves nothing: the kernel accepts TCP for a frozen process.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"

namespace supervisor {

inline constexpr uint32_t kNfsProgram = 100003;
inline constexpr uint32_t kNfsVersion4 = 4;

// The record-marked call (RFC 5531 section 11: one last fragment) for xid.
std::vector<uint8_t> EncodeNullCall(uint32_t xid, uint32_t program = kNfsProgram,
                                    uint32_t version = kNfsVersion4);

// The length of the reply record a record mark (RFC 5531 section 11: the
// last-fragment bit and a 31-bit length) announces. DataLoss for more than
// the few hundred bytes an answer to these calls can take.
absl::StatusOr<uint32_t> ParseRecordMark(std::span<const uint8_t, 4> mark);

// Checks a reply record (without the 4-byte record mark) for xid: an accepted
// reply with SUCCESS. Anything else is an error that says what was wrong.
absl::Status ParseNullReply(std::span<const uint8_t> record, uint32_t xid);

// Connects to host:port (IPv4 or IPv6 literal), sends NULL and waits for the
// reply, all within `timeout`. Never blocks longer than that.
// ResourceExhausted when this process could not make the call at all
// (socket() or connect() failed with EMFILE, ENFILE, ENOBUFS or ENOMEM): it
// says nothing about the server, so it is no miss of the server's.
absl::Status ProbeNfsNull(const std::string& host, uint16_t port, base::Duration timeout);

// NULL also answers with no export loaded (ganesha keeps running when an
// export fails to load), so readiness asks for the export itself: an NFSv4
// COMPOUND { PUTROOTFH, LOOKUP component } as root (AUTH_SYS).
std::vector<uint8_t> EncodeLookupCall(uint32_t xid, const std::string& component);
// The COMPOUND's nfsstat4 (0 = NFS4_OK, 2 = NFS4ERR_NOENT, ...).
absl::StatusOr<uint32_t> ParseCompoundStatus(std::span<const uint8_t> record, uint32_t xid);
// Ok when /component is exported; NotFound when ganesha does not export it;
// FailedPrecondition when it answers with another error (NFS4ERR_DELAY while
// it rereads its exports, or any nfsstat4): answered, but not ready. Any other
// code: no answer (the connection, the deadline, a malformed reply).
absl::Status ProbeNfsExport(const std::string& host, uint16_t port, const std::string& component,
                            base::Duration timeout);

}  // namespace supervisor
