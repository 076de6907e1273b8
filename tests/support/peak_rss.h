// A process's peak resident memory (VmHWM in /proc/<pid>/status): the most it
// ever held, whatever it holds when read, so a bound checked on it holds for
// the whole run, not only at the moment of a sample.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace testing_support {

inline std::optional<uint64_t> PeakRssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  uint64_t kib = 0;
  while (status >> key) {
    if (key == "VmHWM:" && status >> kib) return kib * 1024;
    status.ignore(4096, '\n');
  }
  return std::nullopt;
}

}  // namespace testing_support
