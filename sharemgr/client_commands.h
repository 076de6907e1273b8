// The client subcommands (status, top, watch, mount, unmount, probe). Each call has
// a deadline, never waits for the server to become ready, and maps failures to
// the exit codes in exit_codes.h.
#pragma once

#include <cstdint>
#include <string>

#include "base/tls.h"

namespace CLI {
class App;
}

namespace sharemgr {

struct ClientFlags {
  std::string addr = "127.0.0.1:9600";
  std::string timeout = "3s";
  bool json = false;
  std::string service;
  uint64_t epoch = 0;
  uint64_t generation = 0;
  base::TlsFlags tls;  // mTLS to a --listen port that serves TLS
  // top: refresh period, and how many frames (0: until SIGINT/SIGTERM).
  std::string interval = "1s";
  int64_t iterations = 0;
  bool once = false;
};

// Registers the subcommands on `app`; each sets `*exit_code` when it runs.
void AddClientCommands(CLI::App& app, ClientFlags& flags, int* exit_code);

}  // namespace sharemgr
