// The supervisor's probe, run on its worker thread: an NFS NULL call proves
// ganesha answers (its misses mean "hung"); a LOOKUP of the pseudo path proves
// the export loaded; for a directory share, a stat and statvfs of the
// directory prove it is there and writable. The last LOOKUP and directory
// results are kept for readiness, which the loop thread reads without doing
// any I/O itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"

namespace sharemgr {

// ganesha answering the export's LOOKUP with an error (FailedPrecondition from
// supervisor::ProbeNfsExport: NFS4ERR_DELAY while it rereads its exports, or
// another nfsstat4) is alive but not ready, and no miss: a burst of
// Mount/Unmount keeps it rereading, and probes sped up by each reload met DELAY
// three times within 25 ms and killed a ganesha that was fine. But an error
// that never ends is a wedged ganesha, and readiness alone restarts nothing:
// once the answers have been errors for `limit` in a row, each one is a miss
// (Unavailable), and hang detection kills it after --probe-failures of them.
class ErrorAnswerStreak {
 public:
  explicit ErrorAnswerStreak(base::Duration limit) : limit_(limit) {}

  // `lookup` as the supervisor should count it at `now`. An Ok or NotFound
  // answer ends the streak; no answer at all (a miss already) leaves it be.
  absl::Status Judge(absl::Status lookup, base::TimePoint now);

 private:
  const base::Duration limit_;
  std::optional<base::TimePoint> since_;
};

class ExportProbe {
 public:
  // How long ganesha may answer the LOOKUP with errors before they are misses.
  static constexpr base::Duration kLongestErrorAnswers{30'000};

  // `directory`: the exported directory of a directory share ("" for a block
  // device, whose VolumeMonitor probes it).
  ExportProbe(std::string host, uint16_t port, std::string component, std::string directory,
              const base::TimeSource& clock = base::SteadyClock());

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
  const base::TimeSource& clock_;
  mutable absl::Mutex mu_;
  ErrorAnswerStreak error_answers_ ABSL_GUARDED_BY(mu_){kLongestErrorAnswers};
  absl::Status export_status_ ABSL_GUARDED_BY(mu_);
  absl::Status directory_status_ ABSL_GUARDED_BY(mu_);
  bool read_only_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sharemgr
