#include "base/proc.h"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"

namespace base {

// Every /proc file is read through ReadFile's O_CLOEXEC fd: callers read
// them while other threads fork and exec (the pod runtime spawns pods
// concurrently), and an fd opened without it would leak into those children.
// (glibc's opendir opens its directories O_CLOEXEC already.)

CmdlineMatch CmdlineCarries(const std::optional<std::string>& cmdline, const std::string& flag,
                            const std::string& value) {
  if (!cmdline || cmdline->empty()) return CmdlineMatch::kUnknown;
  // Each argument ends in a NUL: NUL-framed, the pair cannot match inside
  // another argument, and the first argument is framed by the start.
  const std::string framed = '\0' + *cmdline;
  const std::string pair =
      absl::StrCat(std::string(1, '\0'), flag, std::string(1, '\0'), value, std::string(1, '\0'));
  return framed.find(pair) != std::string::npos ? CmdlineMatch::kYes : CmdlineMatch::kNo;
}

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  auto text = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!text.ok()) return std::nullopt;
  const std::string line = text->substr(0, text->find('\n'));
  // comm may hold spaces and parentheses: it ends at the last ')'.
  const auto open = line.find('(');
  const auto close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 > line.size()) {
    return std::nullopt;
  }
  ProcStat out;
  out.comm = line.substr(open + 1, close - open - 1);
  std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
  // fields[0] is field 3 (state): field N is fields[N - 3].
  if (fields.size() < 22 || fields[0].empty()) return std::nullopt;
  out.state = fields[0][0];
  if (!absl::SimpleAtoi(fields[1], &out.ppid) || !absl::SimpleAtoi(fields[2], &out.pgrp) ||
      !absl::SimpleAtoi(fields[11], &out.utime_ticks) ||
      !absl::SimpleAtoi(fields[12], &out.stime_ticks) ||
      !absl::SimpleAtoi(fields[17], &out.num_threads) ||
      !absl::SimpleAtoi(fields[19], &out.start_ticks) ||
      !absl::SimpleAtoi(fields[21], &out.rss_pages)) {
    return std::nullopt;
  }
  return out;
}

bool ProcessAlive(pid_t pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  auto stat = ReadProcStat(pid);
  return stat && stat->start_ticks == start_ticks && stat->state != 'Z' && stat->state != 'X';
}

std::optional<ProcessUsage> ReadProcessUsage(pid_t pid) {
  const auto stat = ReadProcStat(pid);
  if (!stat || stat->state == 'Z' || stat->state == 'X') return std::nullopt;
  const int64_t hz = sysconf(_SC_CLK_TCK);
  const int64_t page = sysconf(_SC_PAGESIZE);
  ProcessUsage out;
  out.rss_bytes = static_cast<uint64_t>(std::max<int64_t>(stat->rss_pages, 0) * page);
  out.cpu_seconds = static_cast<double>(stat->utime_ticks + stat->stime_ticks) /
                    static_cast<double>(hz > 0 ? hz : 100);
  out.threads = stat->num_threads;
  out.open_fds = -1;
  if (DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str())) {
    out.open_fds = 0;
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++out.open_fds;
    }
    closedir(dir);
  }
  return out;
}

std::vector<pid_t> ProcessChildren(pid_t pid) {
  std::vector<pid_t> out;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return out;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    auto text = ReadFile(absl::StrCat(tasks, "/", entry->d_name, "/children"));
    if (!text.ok()) continue;  // the thread is gone
    for (absl::string_view field : absl::StrSplit(*text, ' ', absl::SkipWhitespace())) {
      if (pid_t child = 0; absl::SimpleAtoi(field, &child)) out.push_back(child);
    }
  }
  closedir(dir);
  return out;
}

std::vector<pid_t> ProcessGroupMembers(pid_t pgid) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* entry = readdir(dir)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 0) continue;
    if (auto st = ReadProcStat(pid); st && st->pgrp == pgid) out.push_back(pid);
  }
  closedir(dir);
  return out;
}

std::optional<std::string> BootId() {
  auto text = ReadFile("/proc/sys/kernel/random/boot_id");
  if (!text.ok()) return std::nullopt;
  std::string id(absl::StripAsciiWhitespace(*text));
  if (id.empty()) return std::nullopt;
  return id;
}

int64_t StartTicksToUnixMs(uint64_t start_ticks) {
  // /proc counts the start on the boot-time clock; convert through "now" on
  // both clocks rather than /proc/stat's btime, which has 1 s resolution.
  timespec boot{};
  clock_gettime(CLOCK_BOOTTIME, &boot);
  const int64_t boot_ms = static_cast<int64_t>(boot.tv_sec) * 1000 + boot.tv_nsec / 1'000'000;
  const int64_t wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  const int64_t hz = sysconf(_SC_CLK_TCK);
  const int64_t start_ms = static_cast<int64_t>(start_ticks) * 1000 / (hz > 0 ? hz : 100);
  return wall_ms - (boot_ms - start_ms);
}

}  // namespace base
