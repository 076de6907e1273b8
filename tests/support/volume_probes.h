// Evidence that a daemon's volume probe ran, for tests whose point is "N
// probes later, nothing changed": a probe is the only thing that refreshes
// the status's free_bytes, so a file written straight into the export (and
// fsynced) shows there only once a probe has run after the write.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/support/daemon_process.h"
#include "tests/support/wait_for.h"

namespace testing_support {

// Writes `bytes` to a new file in the export and fsyncs it; false on any error.
inline bool WriteSynced(const std::string& path, size_t bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const std::string chunk(64 << 10, 'p');
  bool ok = true;
  for (size_t done = 0; ok && done < bytes; done += chunk.size()) {
    ok = write(fd, chunk.data(), chunk.size()) == static_cast<ssize_t>(chunk.size());
  }
  ok = ok && fsync(fd) == 0;
  close(fd);
  return ok;
}

// Waits until `probes` volume probes have run one after the other (each seen
// through free_bytes dropping by at least half of a 1 MiB file written before
// it); false when one is not seen within `each`.
inline bool WaitVolumeProbes(const DaemonProcess& d, int probes,
                             std::chrono::milliseconds each = std::chrono::milliseconds(5000)) {
  static int files = 0;
  for (int i = 0; i < probes; ++i) {
    const auto before = d.Status();
    if (!before.ok() || before->free_bytes() < (1u << 20)) return false;
    const std::string path = absl::StrCat(d.export_dir(), "/.probe-evidence-", ++files);
    if (!WriteSynced(path, 1u << 20)) return false;
    const uint64_t after_write = before->free_bytes() - (512u << 10);
    if (!WaitFor(
            [&] {
              const auto now = d.Status();
              return now.ok() && now->free_bytes() <= after_write;
            },
            each)) {
      return false;
    }
  }
  return true;
}

}  // namespace testing_support
