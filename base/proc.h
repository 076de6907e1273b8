// Facts about other processes read from /proc: enough to tell a live process
// from a reused pid (its start time, in this boot) and to find its children.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace base {

struct ProcStat {
  char state = '?';  // R, S, D, Z, ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  // Clock ticks since boot when the process started (field 22 of
  // /proc/<pid>/stat). (pid, start) names one process for the machine's uptime:
  // a reused pid gets a later start.
  uint64_t start_ticks = 0;
  // CPU time in user and kernel mode, in clock ticks (fields 14 and 15).
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  int64_t num_threads = 0;  // field 20
  int64_t rss_pages = 0;    // field 24: resident set size, in pages
  std::string comm;
};

// nullopt when the process does not exist (or its stat cannot be parsed).
std::optional<ProcStat> ReadProcStat(pid_t pid);

// True while `pid` is the process that started at `start_ticks` and has not
// exited (a zombie counts as exited).
bool ProcessAlive(pid_t pid, uint64_t start_ticks);

// What a process uses, for metrics and for bounding ganesha's memory.
struct ProcessUsage {
  uint64_t rss_bytes = 0;
  double cpu_seconds = 0;  // user + system
  int64_t threads = 0;
  int64_t open_fds = 0;  // entries of /proc/<pid>/fd; -1 when it cannot be read
};

// nullopt when the process does not exist (or is a zombie).
std::optional<ProcessUsage> ReadProcessUsage(pid_t pid);

// The pid's direct children, from /proc/<pid>/task/*/children.
std::vector<pid_t> ProcessChildren(pid_t pid);

// Every process in process group `pgid`, from a scan of /proc: a snapshot
// (members may come and go at once).
std::vector<pid_t> ProcessGroupMembers(pid_t pgid);

// What a command line (/proc/<pid>/cmdline: arguments each ended by a NUL)
// says of whether its process runs with the argument pair `flag value`.
enum class CmdlineMatch {
  kYes,
  kNo,  // present, and the pair is not in it
  // Empty or unreadable: a process mid-execve (its old memory gone, its new
  // not mapped yet), a zombie or a kernel thread. Says nothing either way.
  kUnknown,
};
CmdlineMatch CmdlineCarries(const std::optional<std::string>& cmdline, const std::string& flag,
                            const std::string& value);

// This boot's id (/proc/sys/kernel/random/boot_id, a random UUID drawn at
// boot): start ticks count from boot, so (pid, start) names one process only
// together with it. nullopt when it cannot be read.
std::optional<std::string> BootId();

// A process start (ticks since boot) as wall-clock Unix milliseconds, using the
// clocks as they are now.
int64_t StartTicksToUnixMs(uint64_t start_ticks);

}  // namespace base
