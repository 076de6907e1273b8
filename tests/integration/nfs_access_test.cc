// Who ganesha lets in, end to end: a real ganesha bound to the host's end of
// a veth pair the test makes, a real NFS client (libnfs' nfs-cat) inside the
// test's own network namespace, and root squashing seen on the files written.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/daemon_process.h"
#include "tests/support/net_namespace.h"
#include "tests/support/nfs_client.h"
#include "tests/support/require_ok.h"

namespace {

using testing_support::DaemonProcess;
using testing_support::NetNamespace;
using testing_support::RequireOk;

std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> flags) {
  auto d = DaemonProcess::Start({.extra_flags = std::move(flags)});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(*d);
}

// nfs-cat from inside the namespace: the file's content, or nfs-cat's error.
supervisor::ProgramResult CatFromNamespace(const NetNamespace& ns, const DaemonProcess& d,
                                           const std::string& file) {
  return ns.Run({"nfs-cat", "nfs://" + ns.host_address() + d.pseudo_path() + file +
                                "?version=4&nfsport=" + std::to_string(d.nfs_port())});
}

uid_t OwnerOf(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_uid;
}

}  // namespace

TEST_CASE("--nfs-clients: the listed client reads the export, another address is refused") {
  const NetNamespace ns;
  {
    auto d = StartDaemon({"--nfs-address", ns.host_address(), "--nfs-clients", ns.address()});
    std::ofstream(d->export_dir() + "/hello.txt") << "scoped";
    const auto read = CatFromNamespace(ns, *d, "/hello.txt");
    CHECK_MESSAGE(read.exit_code == 0, read.output);
    CHECK(read.output.find("scoped") != std::string::npos);
  }
  // The same client, the same file, an export listing someone else.
  auto d = StartDaemon({"--nfs-address", ns.host_address(), "--nfs-clients", "10.213.250.2",
                        "--nfs-clients", "10.213.251.0/24"});
  std::ofstream(d->export_dir() + "/hello.txt") << "scoped";
  const auto refused = CatFromNamespace(ns, *d, "/hello.txt");
  CHECK_MESSAGE(refused.exit_code != 0, refused.output);
  CHECK(refused.output.find("scoped") == std::string::npos);
  // The share itself is fine: only that client is kept out.
  CHECK(RequireOk(d->Status()).state() == sharemanager::v1::SERVING);
  // The probe's own address (this host's end, where the export probe comes
  // from) may look the export up, never read a file: no data, not as root.
  CHECK_FALSE(
      testing_support::ReadOnce(ns.host_address(), d->nfs_port(), d->pseudo_path(), "/hello.txt")
          .ok());
}

TEST_CASE("--squash root: files root writes over NFS belong to --anon-uid, not to root") {
  for (const bool squash : {false, true}) {
    CAPTURE(squash);
    auto d = squash ? StartDaemon({"--squash", "root", "--anon-uid", "4321", "--anon-gid", "4321"})
                    : StartDaemon({});
    // Open to everyone, so a squashed root may create a file at all.
    std::filesystem::permissions(d->export_dir(), std::filesystem::perms::all);
    REQUIRE(d->WriteEventually("/by-root.txt", "root wrote this").ok());
    CHECK(OwnerOf(d->export_dir() + "/by-root.txt") == (squash ? 4321u : 0u));
  }
}
