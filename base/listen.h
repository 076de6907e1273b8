// TCP listening sockets: opening one, checking that one could be opened (for
// a server that binds by itself: gRPC, civetweb, ganesha), and telling which
// process holds the one a connection reaches. One way for every listener, so
// each port taken says the same: "bind 127.0.0.1:9600: Address already in use".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace base {

// A non-blocking, close-on-exec socket listening on HOST:PORT (an IP literal,
// [V6], localhost or empty). A wildcard host is every address, IPv6 and IPv4
// alike where the host has IPv6 (what gRPC's own listener does). SO_REUSEADDR
// as every server here sets it (a restart binds despite the last run's
// TIME_WAIT connections); no SO_REUSEPORT, so no second process can share it.
// Unavailable with the system call and errno otherwise.
absl::StatusOr<UniqueFd> ListenTcp(const std::string& host_port);

// Whether ListenTcp(host_port) would succeed now: it is opened and closed
// again. A server that binds its port itself is checked first, so that a taken
// port is one clear line; another process may still take it before that
// server binds, which is why the servers' own failures are handled too.
absl::Status CheckCanListenTcp(const std::string& host_port);

// HOST:PORT, with an IPv6 literal in brackets.
std::string JoinHostPort(const std::string& host, uint16_t port);

// Whether the TCP connections to host:port (an IPv4 or IPv6 literal) in the
// network namespace of `pid` reach `pid`: Ok when every socket listening
// there (on that address or a wildcard one; /proc/<pid>/net/tcp and tcp6) is
// one of pid's open files (its /proc/<pid>/fd links name the socket's inode),
// and there is one. FailedPrecondition saying so when a listener is another
// process's or there is none; Unavailable when /proc cannot be read. Sockets
// are told apart by inode, which the kernel assigns: no answer on the wire
// can pass for it, and without SO_REUSEPORT no other socket can listen on
// the same address and port at once.
absl::Status CheckListenerOwner(pid_t pid, const std::string& host, uint16_t port);

}  // namespace base
