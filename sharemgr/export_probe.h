// The supervisor's probe, run on its worker thread: an NFS NULL call proves
// ganesha answers (its misses mean "hung"); a LOOKUP of the pseudo path proves
// the export loaded; for a directory share, a stat and statvfs of the
// directory prove it is there and writable. The last LOOKUP and directory
// results are kept for readiness, which the loop thread reads without doing
// any I/O itself.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"

namespace sharemgr {

class ExportProbe {
 public:
  // `directory`: the exported directory of a directory share ("" for a block
  // device, whose VolumeMonitor probes it).
  ExportProbe(std::string host, uint16_t port, std::string component, std::string directory);

  // Worker thread.
  absl::Status Probe(base::Duration timeout);
  // Any thread.
  absl::Status export_status() const;
  absl::Status directory_status() const;
  bool directory_read_only() const;

 private:
  const std::string host_;
  const uint16_t port_;
  const std::string component_;
  const std::string directory_;
  mutable absl::Mutex mu_;
  absl::Status export_status_ ABSL_GUARDED_BY(mu_);
  absl::Status directory_status_ ABSL_GUARDED_BY(mu_);
  bool read_only_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sharemgr
