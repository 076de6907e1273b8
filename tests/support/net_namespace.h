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
    peer_ = "smn" + tag;
    const std::string& peer = peer_;
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

  // What runs a program inside the namespace's network only (a DaemonSpec's
  // wrapper): unlike `ip netns exec`, it keeps the host's mount namespace, so
  // what the program mounts is seen (and cleaned up) by the test.
  std::vector<std::string> NetworkOnlyWrapper() const {
    return {"nsenter", "--net=" + path(), "--"};
  }
  // What setns(2) opens to move a thread in.
  std::string path() const { return "/var/run/netns/" + name_; }

  // Cuts the namespace off (its end of the veth pair down: nothing in or
  // out but its loopback), and heals it again.
  void Cut() const { SetPeerLink("down"); }
  void Heal() const { SetPeerLink("up"); }

  // Runs `argv` inside the namespace.
  supervisor::ProgramResult Run(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", name_});
    return RunCommand(argv, milliseconds(15'000));
  }

 private:
  void SetPeerLink(const std::string& state) const {
    const auto result = RunCommand({"ip", "-n", name_, "link", "set", peer_, state});
    REQUIRE_MESSAGE(result.exit_code == 0, "ip link set ", peer_, " ", state, ": ", result.output);
  }

  std::string name_, host_if_, peer_, host_address_, address_;
};

}  // namespace testing_support
