// The local pod runtime's port table (<work_dir>/.ports, LocalPortTable::Load):
// "volume grpc nfs" lines. Loaded ports are real ports (1-65535). Input: the
// file. (The runtime's pod record parser is not reachable from outside
// local_pod_runtime.cc, so it has no target here.)
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/files.h"
#include "controller/runtime/local/local_pod_runtime.h"
#include "tests/fuzz/fuzz_input.h"

using fuzz::Check;

namespace {

// One work dir per process under $TMPDIR (tests/fuzz/run.sh points it into
// its build dir), removed at exit (never freed: the exit handler reads it).
const std::string& WorkDir() {
  static const std::string* const dir = [] {
    const char* tmp = getenv("TMPDIR");
    auto* path = new std::string(std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") +
                                 "/ports-fuzz.XXXXXX");
    Check(mkdtemp(path->data()) != nullptr, "mkdtemp", *path);
    atexit([] { std::filesystem::remove_all(WorkDir()); });
    return path;
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = WorkDir();
  Check(base::WriteFileAtomically(dir + "/.ports", std::string(fuzz::Text(data, size)), 0600,
                                  base::Durability::kReplaced)
            .ok(),
        "write .ports");
  auto table = controller::LocalPortTable(dir).Load();
  if (!table.ok()) {
    Check(!table.status().message().empty(), "a refused port table says why");
    return 0;
  }
  for (const auto& [volume, ports] : *table) {
    Check(ports.grpc != 0 && ports.nfs != 0, "a loaded port is a port", volume);
    Check(volume.find('\n') == std::string::npos && volume.find(' ') == std::string::npos,
          "a volume is one field of one line", volume);
  }
  return 0;
}
