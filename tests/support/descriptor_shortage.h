// This process out of file descriptors, for tests of what runs into it: the
// soft RLIMIT_NOFILE lowered and every descriptor under it taken, both given
// back when the object goes. ctest runs each case in a process of its own, so
// nothing else sees the shortage.
#pragma once

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "base/unique_fd.h"

namespace testing_support {

class DescriptorShortage {
 public:
  explicit DescriptorShortage(rlim_t limit) {
    REQUIRE(getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    rlimit low = saved_;
    low.rlim_cur = limit;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
    TakeFreed();
    REQUIRE(errno == EMFILE);
  }
  ~DescriptorShortage() {
    taken_.clear();
    setrlimit(RLIMIT_NOFILE, &saved_);
  }
  DescriptorShortage(const DescriptorShortage&) = delete;
  DescriptorShortage& operator=(const DescriptorShortage&) = delete;

  // Frees one of the descriptors taken: the next one made gets it, and the one after runs short.
  void GiveOneBack() {
    REQUIRE_FALSE(taken_.empty());
    taken_.pop_back();
  }

  // Takes whatever descriptors were freed since (e.g. by gRPC's threads).
  void TakeFreed() {
    for (base::UniqueFd fd(dup(STDERR_FILENO)); fd; fd.reset(dup(STDERR_FILENO))) {
      taken_.push_back(std::move(fd));
    }
  }

 private:
  rlimit saved_{};
  std::vector<base::UniqueFd> taken_;
};

}  // namespace testing_support
