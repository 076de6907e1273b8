// ganesha.conf from whatever GaneshaConfig::Create accepts: the rendered text
// must parse (balanced braces, closed strings, no control byte, one value
// where one belongs) and read back, with and without the export, to exactly
// the values that went in. Input: NUL-separated fields: volume, export dir,
// bind address, port, grace, lease, recovery root, plugins dir, probe
// address, squash (none/root/all), anon uid, anon gid, then the clients.
#include <string>

#include "absl/strings/numbers.h"
#include "sharemgr/ganesha_config.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/ganesha_conf_reader.h"

using fuzz::Check;

namespace {

int64_t Number(const std::string& text) {
  int64_t n = 0;
  return absl::SimpleAtoi(text, &n) ? n : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> f = fuzz::Fields(data, size);
  if (f.size() < 12) f.resize(12);
  sharemgr::GaneshaConfigInput in{
      .volume = f[0],
      .export_dir = f[1],
      .bind_address = f[2],
      .nfs_port = Number(f[3]),
      .grace_seconds = Number(f[4]),
      .lease_seconds = Number(f[5]),
      .recovery_root = f[6],
      .plugins_dir = f[7],
      .clients = {f.begin() + 12, f.end()},
      .probe_client = f[8],
      .squash = f[9] == "root"  ? sharemgr::Squash::kRoot
                : f[9] == "all" ? sharemgr::Squash::kAll
                                : sharemgr::Squash::kNone,
      .anon_uid = Number(f[10]),
      .anon_gid = Number(f[11]),
  };
  auto config = sharemgr::GaneshaConfig::Create(in);
  if (!config.ok()) return 0;
  for (bool with_export : {false, true}) {
    const std::string text = config->Render(with_export);
    auto back = fuzz::ReadGaneshaConf(text, with_export);
    Check(back.ok(), "a rendered ganesha.conf parses", back.status().ToString() + "\n" + text);
    const std::string diff = fuzz::Diff(in, *back, with_export);
    Check(diff.empty(), "a rendered ganesha.conf reads back to its input", diff + "\n" + text);
  }
  return 0;
}
