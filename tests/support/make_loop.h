// LoopDevice helpers for a doctest test case, which fail the test (REQUIRE)
// when they cannot. Header-only, so the benchmarks that share tests/support need no doctest.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "tests/support/loop_device.h"

namespace testing_support {

inline std::unique_ptr<LoopDevice> MakeLoop(const std::string& fs,
                                            const std::string& size = "64M") {
  auto loop = LoopDevice::Create(size, fs);
  REQUIRE_MESSAGE(loop.ok(), loop.status().ToString());
  return std::move(*loop);
}

// Bytes the loop device's sparse image really holds: what a trim gives back.
// Synced first: until then the host filesystem still counts the blocks of
// the ranges a discard punched out while their writes were in its page cache.
inline uint64_t AllocatedBytes(const LoopDevice& loop) {
  const int fd = open(loop.image().c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const bool synced = fsync(fd) == 0;
  struct stat st {};
  const bool stated = fstat(fd, &st) == 0;
  close(fd);
  REQUIRE(synced);
  REQUIRE(stated);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace testing_support
