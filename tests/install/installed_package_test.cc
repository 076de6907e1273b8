// The controller library as a storage controller consumes it: this build
// installed into a temp prefix (`cmake --install`), an outside project
// (tests/install/consumer, copied out of the tree so nothing but the prefix
// can supply a header) configured and built against that prefix alone, and
// run against a real share-manager.
#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/daemon_process.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::RequireOk;
using testing_support::RunCommand;
using testing_support::TempDir;

// Configuring and compiling against gRPC on a busy 2-core machine.
constexpr milliseconds kBuildTimeout{600'000};

supervisor::ProgramResult RequireRun(const std::vector<std::string>& argv) {
  auto result = RunCommand(argv, kBuildTimeout);
  INFO(argv[0], " ", argv[1], " ", argv[2], ":\n", result.output);
  REQUIRE(result.exit_code == 0);
  return result;
}

// Copies tests/install/<project> out of the tree, configures it against
// `prefix` only (no package registry: a build tree found there would do) with
// this build's compiler and linker flags (a coverage build's archives need its
// runtime), and builds it.
std::string BuildOutsideProject(const std::string& project, const std::string& prefix,
                                const std::string& work) {
  const std::string src = work + "/" + project + "-src", build = work + "/" + project + "-build";
  fs::copy(std::string(SHAREMGR_INSTALL_TESTS_DIR) + "/" + project, src,
           fs::copy_options::recursive);
  RequireRun({CMAKE_COMMAND, "-S", src, "-B", build, "-DCMAKE_PREFIX_PATH=" + prefix,
              "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_CXX_COMPILER=" SHAREMGR_CXX,
              "-DCMAKE_EXE_LINKER_FLAGS=" SHAREMGR_EXE_LINKER_FLAGS});
  std::ifstream cache(build + "/CMakeCache.txt");
  std::stringstream text;
  text << cache.rdbuf();
  CHECK_MESSAGE(text.str().find("ShareManager_DIR:PATH=" + prefix + "/") != std::string::npos,
                "the package was found somewhere else than the install prefix");
  RequireRun({CMAKE_COMMAND, "--build", build, "-j1"});
  return build;
}

TEST_CASE("installed package: an outside project builds against it and asks a real share-manager") {
  TempDir work("sharemgr-install");
  const std::string prefix = work.path() + "/prefix";
  RequireRun({CMAKE_COMMAND, "--install", SHAREMGR_BUILD_DIR, "--prefix", prefix});

  // The library, its headers and the package; nothing of the daemon's code or
  // the test-only target.
  const std::string lib = prefix + "/" SHAREMGR_INSTALL_LIBDIR "/share-manager/";
  const std::string include = prefix + "/" SHAREMGR_INSTALL_INCLUDEDIR "/";
  CHECK(fs::exists(lib + "libcontroller.a"));
  CHECK(fs::exists(prefix + "/" SHAREMGR_INSTALL_LIBDIR
                            "/cmake/ShareManager/ShareManagerConfig.cmake"));
  // The public API is controller/include: what a consumer needs to ask a
  // share-manager. The controller's own parts (core, store, ha, runtime) and
  // its test doubles stay inside the library.
  CHECK(fs::exists(include + "controller/share_client.h"));
  CHECK(fs::exists(include + "sharemanager/v1/sharemanager.pb.h"));
  CHECK_FALSE(fs::exists(lib + "libsharemgr.a"));
  CHECK_FALSE(fs::exists(lib + "libsupervisor.a"));
  CHECK_FALSE(fs::exists(lib + "libcontroller_testing.a"));
  CHECK_FALSE(fs::exists(include + "sharemgr"));
  for (const char* internal : {"core", "store", "ha", "runtime", "testing", "cmd"}) {
    CHECK_FALSE(fs::exists(include + "controller/" + internal));
  }
  const auto members = RequireRun({"ar", "t", lib + "libcontroller.a"}).output;
  CHECK(members.find("share_client.cc.o") != std::string::npos);
  CHECK(members.find("fault_injector") == std::string::npos);
  CHECK(members.find("simulated_runtime") == std::string::npos);

  // Every object of the installed libcontroller.a links against the package
  // and its dependencies alone: nothing it needs is left behind in the tree.
  BuildOutsideProject("link_check", prefix, work.path());

  const std::string consumer =
      BuildOutsideProject("consumer", prefix, work.path()) + "/share-status";
  auto daemon = RequireOk(DaemonProcess::Start());
  const auto served = RunCommand({consumer, daemon->addr()});
  INFO(served.output);
  CHECK(served.exit_code == 0);
  CHECK(served.output.find(daemon->volume() +
                           " SERVING 127.0.0.1:" + std::to_string(daemon->nfs_port()) +
                           daemon->pseudo_path()) != std::string::npos);

  // Its exit code follows the share-manager: gone is unreachable (2).
  daemon->Signal(SIGTERM);
  CHECK(RequireOk(daemon->WaitExit(milliseconds(30'000))) == 0);
  CHECK(RunCommand({consumer, daemon->addr()}).exit_code == 2);
}

}  // namespace
