#include "tests/support/daemon_log.h"

#include "base/clock.h"

namespace testing_support {

std::optional<absl::Time> LoggedAt(const std::string& log, const std::string& text, size_t from) {
  const auto at = log.find(text, from);
  if (at == std::string::npos) return std::nullopt;
  const auto line_start = log.rfind('\n', at);
  const std::string line = log.substr(line_start == std::string::npos ? 0 : line_start + 1);
  absl::Time t;
  std::string error;
  if (!absl::ParseTime("%Y-%m-%dT%H:%M:%E3S%Ez", line.substr(0, line.find(' ')), &t, &error)) {
    return std::nullopt;
  }
  return t;
}

std::optional<absl::Time> LoggedValidUntil(const std::string& log) {
  std::optional<absl::Time> latest;
  for (auto at = log.find(kLeaseRenewedLine); at != std::string::npos;
       at = log.find(kLeaseRenewedLine, at + 1)) {
    const auto line_start = log.rfind('\n', at);
    const auto line_end = log.find('\n', at);
    const std::string line =
        log.substr(line_start == std::string::npos ? 0 : line_start + 1,
                   line_end == std::string::npos ? std::string::npos : line_end - line_start - 1);
    const auto valid = line.find("; valid ");
    const auto more = line.find(" more", valid);
    const auto written = LoggedAt(line, kLeaseRenewedLine);
    if (valid == std::string::npos || more == std::string::npos || !written) continue;
    const auto left = base::ParseDuration(line.substr(valid + 8, more - valid - 8));
    if (!left.ok()) continue;
    const absl::Time until = *written + absl::FromChrono(*left);
    if (!latest || until > *latest) latest = until;
  }
  return latest;
}

}  // namespace testing_support
