// /proc/self/mountinfo as the volume monitor reads it (libmount, then the
// options it looks for: ro, emergency_ro). The kernel writes that file, but
// mount sources and options come from whoever mounted: a path, a label or a
// FUSE source name can hold almost anything. Input: the target, NUL, the
// mountinfo text (no NUL: the target is /export/vol).
#include <string>

#include "absl/strings/str_split.h"
#include "sharemgr/volume.h"
#include "tests/fuzz/fuzz_input.h"

using fuzz::Check;

namespace {

bool Has(const std::string& options, const std::string& name) {
  for (absl::string_view o : absl::StrSplit(options, ',')) {
    if (o == name) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::Text(data, size);
  const size_t nul = text.find('\0');
  const std::string target =
      nul == std::string_view::npos ? "/export/vol" : std::string(text.substr(0, nul));
  const std::string mountinfo(nul == std::string_view::npos ? text : text.substr(nul + 1));

  const sharemgr::MountState state = sharemgr::ParseMountState(mountinfo, target);
  if (!state.mounted) {
    Check(state.source.empty() && state.vfs_options.empty() && state.fs_options.empty() &&
              !state.read_only && !state.fs_error,
          "an unmounted target has no mount state");
    return 0;
  }
  Check(!target.empty(), "only a named target is found");
  Check(state.fs_error == Has(state.fs_options, "emergency_ro"),
        "fs_error is emergency_ro among the superblock options", state.fs_options);
  Check(state.read_only ==
            (Has(state.vfs_options, "ro") || Has(state.fs_options, "ro") || state.fs_error),
        "read_only is ro in either option list, or a filesystem error",
        state.vfs_options + " / " + state.fs_options);
  return 0;
}
