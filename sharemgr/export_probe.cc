#include "sharemgr/export_probe.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "supervisor/nfs_null_probe.h"

namespace sharemgr {
namespace {

// Present, a directory, not on a read-only mount.
absl::Status CheckDirectory(const std::string& dir, bool& read_only) {
  struct statvfs vfs {};
  read_only = statvfs(dir.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0;
  if (read_only) {
    return absl::UnavailableError(absl::StrCat("export filesystem at ", dir, " is read-only"));
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    return absl::UnavailableError(
        absl::StrCat("export directory ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::UnavailableError(absl::StrCat("export path ", dir, " is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ErrorAnswerStreak::Judge(absl::Status lookup, base::TimePoint now) {
  if (lookup.ok() || lookup.code() == absl::StatusCode::kNotFound) {
    since_.reset();
    return lookup;
  }
  if (lookup.code() != absl::StatusCode::kFailedPrecondition) return lookup;
  if (!since_) since_ = now;
  const auto lasted = std::chrono::duration_cast<base::Duration>(now - *since_);
  if (lasted < limit_) return lookup;
  return absl::UnavailableError(absl::StrCat(lookup.message(), ", in every answer for ",
                                             base::FormatDuration(lasted), ": counted as a miss"));
}

ExportProbe::ExportProbe(std::string host, uint16_t port, std::string component,
                         std::string directory, const base::TimeSource& clock)
    : host_(std::move(host)),
      port_(port),
      component_(std::move(component)),
      directory_(std::move(directory)),
      clock_(clock) {}

absl::Status ExportProbe::Probe(base::Duration timeout) {
  if (!directory_.empty()) {
    bool read_only = false;
    absl::Status dir = CheckDirectory(directory_, read_only);
    absl::MutexLock lock(&mu_);
    directory_status_ = dir;
    read_only_ = read_only;
  }
  if (auto null = supervisor::ProbeNfsNull(host_, port_, timeout); !null.ok()) return null;
  auto answer = supervisor::ProbeNfsExport(host_, port_, component_, timeout);
  absl::MutexLock lock(&mu_);
  // A LOOKUP that got no answer is a miss; an answer leaves the share ready
  // or not, unless its errors have lasted (ErrorAnswerStreak).
  auto lookup = error_answers_.Judge(std::move(answer), clock_.Now());
  if (!lookup.ok() && lookup.code() != absl::StatusCode::kNotFound &&
      lookup.code() != absl::StatusCode::kFailedPrecondition) {
    return lookup;
  }
  export_status_ = lookup;
  return absl::OkStatus();
}

absl::Status ExportProbe::export_status() const {
  absl::MutexLock lock(&mu_);
  return export_status_;
}

absl::Status ExportProbe::directory_status() const {
  absl::MutexLock lock(&mu_);
  return directory_status_;
}

bool ExportProbe::directory_read_only() const {
  absl::MutexLock lock(&mu_);
  return read_only_;
}

}  // namespace sharemgr
