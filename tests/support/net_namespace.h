// A network namespace of the test's own, joined to the host by a veth pair on
// a private /30: a second NFS client with its own source address, without
// sending a packet anywhere but between the two ends. Removed (and the veth
// pair with it) when the object goes, pass or fail.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/daemon_process.h"

namespace testing_support {

class NetNamespace {
 public:
  NetNamespace() {
    static std::atomic<int> next{0};
    const int n = next++;
    // 10.213.<n>.0/30: host .1, namespace .2. Interface names stay under 16 bytes.
    const std::string tag = absl::StrCat(getpid() % 100000, "x", n);
    name_ = "smt" + tag;
    host_if_ = "smh" + tag;
    host_address_ = absl::StrCat("10.213.", n % 64, ".1");
    address_ = absl::StrCat("10.213.", n % 64, ".2");
    const std::string peer = "smn" + tag;
    for (const auto& argv : std::vector<std::vector<std::string>>{
             {"ip", "netns", "add", name_},
             {"ip", "link", "add", host_if_, "type", "veth", "peer", "name", peer},
             {"ip", "link", "set", peer, "netns", name_},
             {"ip", "addr", "add", host_address_ + "/30", "dev", host_if_},
             {"ip", "link", "set", host_if_, "up"},
             {"ip", "-n", name_, "addr", "add", address_ + "/30", "dev", peer},
             {"ip", "-n", name_, "link", "set", peer, "up"},
             {"ip", "-n", name_, "link", "set", "lo", "up"},
         }) {
      const auto result = RunCommand(argv);
      REQUIRE_MESSAGE(result.exit_code == 0, argv[1], " ", argv[2], ": ", result.output);
    }
  }
  ~NetNamespace() {
    RunCommand({"ip", "netns", "del", name_});    // takes the veth pair with it
    RunCommand({"ip", "link", "del", host_if_});  // in case the namespace never got its end
  }
  NetNamespace(const NetNamespace&) = delete;
  NetNamespace& operator=(const NetNamespace&) = delete;

  const std::string& name() const { return name_; }
  // The namespace's own address, and the host's end it reaches.
  const std::string& address() const { return address_; }
  const std::string& host_address() const { return host_address_; }

  // Runs `argv` inside the namespace.
  supervisor::ProgramResult Run(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", name_});
    return RunCommand(argv, milliseconds(15'000));
  }

 private:
  std::string name_, host_if_, host_address_, address_;
};

}  // namespace testing_support
