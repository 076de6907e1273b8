#include "controller/runtime/local/local_pod_runtime.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>
#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "base/files.h"
#include "base/fmt_absl.h"
#include "base/proc.h"
#include "base/validate.h"

namespace controller {

using SteadyClock = std::chrono::steady_clock;

// What <work_dir>/<volume>/pods/<pod>.pod says: one "key=value" per line.
struct PodRecord {
  Pod pod;
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  // The pod's own --stop-timeout: its grace after a restart. Unset in records
  // written before it was kept (pods that outlived a controller upgrade).
  std::optional<std::chrono::milliseconds> stop_timeout;
  // The boot the pid and start ticks belong to. Empty in older records, or
  // when the boot id could not be read.
  std::string boot_id;
  // Every process the runtime tracked for the pod when it wrote the record
  // (pid, start ticks), the share-manager included while it lived: a
  // filesystem check can outlive the share-manager, and a runtime that
  // adopts the pod must still wait for it. Empty in older records.
  std::vector<std::pair<pid_t, uint64_t>> procs;
  // Set once Delete began (steady_clock, CLOCK_MONOTONIC: one clock for the
  // whole boot, whichever process reads it): an adopting runtime goes on
  // with the delete and its grace instead of serving the pod again.
  std::optional<SteadyClock::time_point> delete_started;
};

namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool Exited(int pidfd) {
  pollfd p{.fd = pidfd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, 0) > 0;
}

void PidfdSignal(int pidfd, int sig) { syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0); }

// Signals the process group `leader` leads, if it leads one and has not
// exited. A group's id is its leader's pid, and the kernel keeps a pid
// allocated while its process exists (a zombie included) and while any
// process of its group does: while the leader has not exited, no other
// process or group can have this id. The exit is checked last, just before
// the kill: only an instant in which the leader would have to exit, be
// reaped, its group empty out and its id be handed to a new group is left.
void SignalGroup(pid_t leader, int leader_pidfd, int sig) {
  if (getpgid(leader) == leader && !Exited(leader_pidfd)) kill(-leader, sig);
}

// Signals the process through its pidfd (which cannot hit a reused pid) and
// the group it leads. The group first: once its leader got the signal it may
// be gone, and the group no longer reachable safely.
void SignalWithGroup(pid_t pid, int pidfd, int sig) {
  SignalGroup(pid, pidfd, sig);
  PidfdSignal(pidfd, sig);
}

// Ends a pod still held at its gate (its share-manager never exec'd): the
// shell sees EOF on its stdin and SIGKILL, and is reaped here.
void EndHeld(supervisor::ChildProcess& process, base::UniqueFd gate_write) {
  gate_write.reset();
  process.SignalGroup(SIGKILL);
  pollfd p{.fd = process.pidfd(), .events = POLLIN, .revents = 0};
  poll(&p, 1, 10'000);
  (void)process.Reap();
}

// The value of --stop-timeout in `flags` (either spelling), else the daemon's default.
std::chrono::milliseconds StopTimeout(const std::vector<std::string>& flags) {
  std::optional<std::string> value;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] == "--stop-timeout" && i + 1 < flags.size()) value = flags[i + 1];
    if (flags[i].starts_with("--stop-timeout=")) value = flags[i].substr(15);
  }
  if (value) {
    if (auto d = base::ParseDuration(*value); d.ok()) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(*d);
    }
  }
  return std::chrono::seconds(10);
}

// A tool that writes filesystem metadata (/proc's comm): fsck and its
// fsck.<type> helpers, e2fsck, mkfs and its mkfs.<type>, mke2fs, resize2fs,
// xfs_repair, xfs_growfs. SIGKILLed mid-write it can leave the filesystem
// worse than it found it; on SIGTERM it stops at a safe point.
bool IsFilesystemCheck(const std::string& comm) {
  return comm == "e2fsck" || comm == "fsck" || comm.starts_with("fsck.") || comm == "mkfs" ||
         comm.starts_with("mkfs.") || comm == "mke2fs" || comm == "resize2fs" ||
         comm == "xfs_repair" || comm == "xfs_growfs";
}

bool PortFree(uint16_t port) {
  base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return fd && bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

// A fresh instance id (128 random bits in hex) for --pod-uid: an answer on a
// pod's address counts only from the share-manager started with it.
std::string NewPodUid() {
  std::random_device random;
  std::string uid;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&uid, absl::Hex(random(), absl::kZeroPad8));
  return uid;
}

// Whether `pid`'s command line carries `--pod-uid <uid>` (the held shell's
// and the share-manager's both do): a record that names another process,
// however its start time matches, is not followed to it. Records without a
// uid (older ones) have only the start time. Mid-execve the command line
// reads empty: read again for a few ms, and if it stays empty the pid, start
// time and boot already checked are trusted; only a command line that is
// there and lacks the uid is another process's.
bool RunsWithUid(pid_t pid, const std::string& uid) {
  if (uid.empty()) return true;
  const std::string path = absl::StrCat("/proc/", pid, "/cmdline");
  for (int attempt = 0;; ++attempt) {
    auto text = base::ReadFile(path);
    const auto match = base::CmdlineCarries(
        text.ok() ? std::optional<std::string>(*std::move(text)) : std::nullopt, "--pod-uid", uid);
    if (match != base::CmdlineMatch::kUnknown) return match == base::CmdlineMatch::kYes;
    if (attempt == 4) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Whether `pid` is this process or one of its ancestors.
bool IsSelfOrAncestor(pid_t pid) {
  for (pid_t p = getpid(); p > 0;) {
    if (p == pid) return true;
    const auto st = base::ReadProcStat(p);
    if (!st || st->ppid == p) return false;
    p = st->ppid;
  }
  return false;
}

std::string FormatProcs(const std::vector<std::pair<pid_t, uint64_t>>& procs) {
  return absl::StrJoin(procs, ",", [](std::string* out, const auto& p) {
    absl::StrAppend(out, p.first, ":", p.second);
  });
}

// A pid of 0 or 1 would have kill() hit ourselves or everything; start ticks
// of 0 would tell no reused pid apart (a process started at boot matches).
absl::Status CheckVerifiable(pid_t pid, uint64_t start_ticks) {
  if (pid <= 1) return absl::DataLossError(absl::StrCat("pod record names pid ", pid));
  // No pod's process, whatever its start time: signalling it would stop the
  // runtime itself.
  if (IsSelfOrAncestor(pid)) {
    return absl::DataLossError(absl::StrCat(
        "pod record names pid ", pid,
        ", this runtime's own process or an ancestor of it: no pod's; remove the record"));
  }
  if (start_ticks == 0) {
    return absl::DataLossError(absl::StrCat(
        "pod record names pid ", pid,
        " without its start time (start_ticks 0): whoever has that pid now cannot be told from "
        "the pod's process; make sure it is not the pod's, then remove the record"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<pid_t, uint64_t>>> ParseProcs(absl::string_view text) {
  std::vector<std::pair<pid_t, uint64_t>> procs;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> f = absl::StrSplit(item, ':');
    pid_t pid = 0;
    uint64_t start = 0;
    if (!absl::SimpleAtoi(f.first, &pid) || !absl::SimpleAtoi(f.second, &start)) {
      return absl::DataLossError("malformed procs in pod record");
    }
    if (auto s = CheckVerifiable(pid, start); !s.ok()) return s;
    procs.emplace_back(pid, start);
  }
  return procs;
}

std::string FormatRecord(const PodRecord& r) {
  return absl::StrCat(
      "name=", r.pod.name, "\nvolume=", r.pod.volume, "\nepoch=", r.pod.epoch, "\npid=", r.pid,
      "\nstart_ticks=", r.start_ticks, "\nstarted_unix_ms=", r.pod.started_unix_ms,
      "\nendpoint=", r.pod.endpoint, "\nnfs_port=", r.pod.nfs_port,
      "\nstop_timeout_ms=", r.stop_timeout.value_or(StopTimeout({})).count(),
      r.boot_id.empty() ? "" : "\nboot_id=", r.boot_id,
      r.pod.uid.empty() ? "" : "\nuid=", r.pod.uid, "\nprocs=", FormatProcs(r.procs),
      r.delete_started ? absl::StrCat("\nstate=deleting\ndelete_started_ms=",
                                      std::chrono::duration_cast<std::chrono::milliseconds>(
                                          r.delete_started->time_since_epoch())
                                          .count())
                       : "",
      "\n");
}

absl::StatusOr<PodRecord> ParseRecord(const std::string& text) {
  std::map<std::string, std::string> kv;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(line, absl::MaxSplits('=', 1));
    kv[p.first] = p.second;
  }
  PodRecord r;
  uint32_t port = 0;
  r.pod.name = kv["name"];
  r.pod.volume = kv["volume"];
  r.pod.endpoint = kv["endpoint"];
  r.boot_id = kv["boot_id"];
  r.pod.uid = kv["uid"];  // empty in older records: the start time tells instances apart
  if (r.pod.name.empty() || r.pod.volume.empty() || !absl::SimpleAtoi(kv["epoch"], &r.pod.epoch) ||
      !absl::SimpleAtoi(kv["pid"], &r.pid) ||
      !absl::SimpleAtoi(kv["start_ticks"], &r.start_ticks) ||
      !absl::SimpleAtoi(kv["started_unix_ms"], &r.pod.started_unix_ms) ||
      !absl::SimpleAtoi(kv["nfs_port"], &port) || port > 65535) {
    return absl::DataLossError("malformed pod record");
  }
  if (auto s = CheckVerifiable(r.pid, r.start_ticks); !s.ok()) return s;
  auto procs = ParseProcs(kv["procs"]);
  if (!procs.ok()) return procs.status();
  r.procs = *std::move(procs);
  if (kv["state"] == "deleting") {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(kv["delete_started_ms"], &ms)) {
      return absl::DataLossError("malformed delete_started_ms in pod record");
    }
    r.delete_started = SteadyClock::time_point(std::chrono::milliseconds(ms));
  }
  r.pod.nfs_port = static_cast<uint16_t>(port);
  if (auto it = kv.find("stop_timeout_ms"); it != kv.end()) {
    int64_t ms = 0;
    // Bounded as the daemon bounds its flags (ParseDuration): a day at most,
    // so twice it plus 5 s neither overflows nor waits for ever.
    if (!absl::SimpleAtoi(it->second, &ms) || ms < 0 || ms > 86'400'000) {
      return absl::DataLossError("malformed stop_timeout_ms in pod record");
    }
    r.stop_timeout = std::chrono::milliseconds(ms);
  }
  return r;
}

}  // namespace

absl::StatusOr<std::map<std::string, LocalPortTable::Ports>> LocalPortTable::Load() const {
  std::map<std::string, Ports> out;
  auto text = base::ReadFile(work_dir_ + "/.ports");
  if (!text.ok()) {
    if (text.status().code() == absl::StatusCode::kNotFound) return out;
    return text.status();
  }
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    uint32_t grpc = 0, nfs = 0;
    if (f.size() != 3 || !absl::SimpleAtoi(f[1], &grpc) || !absl::SimpleAtoi(f[2], &nfs) ||
        grpc == 0 || nfs == 0 || grpc > 65535 || nfs > 65535) {
      return absl::DataLossError(absl::StrCat(work_dir_, "/.ports: bad line '", line, "'"));
    }
    out[f[0]] = {static_cast<uint16_t>(grpc), static_cast<uint16_t>(nfs)};
  }
  return out;
}

absl::StatusOr<base::PortRange> LocalPortTable::Usable(base::PortRange range) {
  if (range.first == 0 || range.first > range.last) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid port range ", range.first, "-", range.last));
  }
  const auto ephemeral = base::EphemeralPortRange();
  if (!ephemeral.ok()) return range;  // nothing known to avoid
  if (range.first >= ephemeral->first) {
    return absl::InvalidArgumentError(absl::StrCat(
        "port range ", range.first, "-", range.last, " is not below the kernel's ephemeral range ",
        ephemeral->first, "-", ephemeral->last,
        " (net.ipv4.ip_local_port_range), whose ports outgoing connections take"));
  }
  range.last = std::min<uint16_t>(range.last, ephemeral->first - 1);
  return range;
}

absl::StatusOr<LocalPortTable::Ports> LocalPortTable::Get(const std::string& volume) {
  // Held across read-allocate-write: two runtimes over one work dir (an old
  // one shutting down, a new one starting) must not both take a port.
  const std::string lock_path = work_dir_ + "/.ports.lock";
  base::UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock || flock(lock.get(), LOCK_EX) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot lock ", lock_path, ": ", strerror(errno)));
  }
  auto table = Load();
  if (!table.ok()) return table.status();
  if (auto it = table->find(volume); it != table->end()) return it->second;
  auto range = Usable(range_);
  if (!range.ok()) return range.status();
  std::set<uint16_t> used;
  for (const auto& [name, p] : *table) used.insert({p.grpc, p.nfs});
  std::vector<uint16_t> candidates(size_t{range->last} - range->first + 1);
  std::iota(candidates.begin(), candidates.end(), range->first);
  std::shuffle(candidates.begin(), candidates.end(), std::mt19937(std::random_device()()));
  auto next = candidates.begin();
  auto pick = [&]() -> uint16_t {
    // Not another volume's (whose pod may just be down), and free now.
    next = std::find_if(next, candidates.end(),
                        [&](uint16_t port) { return !used.contains(port) && PortFree(port); });
    return next == candidates.end() ? 0 : *next++;
  };
  Ports ports{.grpc = pick(), .nfs = pick()};
  if (ports.grpc == 0 || ports.nfs == 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no free port in ", range->first, "-", range->last, " for ", volume));
  }
  (*table)[volume] = ports;
  std::string text;
  for (const auto& [name, p] : *table) absl::StrAppend(&text, name, " ", p.grpc, " ", p.nfs, "\n");
  if (auto s = base::WriteFileAtomically(work_dir_ + "/.ports", text, 0644); !s.ok()) return s;
  return ports;
}

absl::StatusOr<std::unique_ptr<LocalPodRuntime>> LocalPodRuntime::Open(
    LocalPodRuntimeOptions options) {
  if (options.work_dir.empty()) {
    return absl::InvalidArgumentError("the pod runtime needs a work dir");
  }
  if (auto range = LocalPortTable::Usable(options.port_range); !range.ok()) return range.status();
  if (auto s = base::EnsureDirectory(options.work_dir, 0755); !s.ok()) return s;
  auto lock = base::FileLock::Acquire(options.work_dir, base::FileLock::Kind::kDirectory,
                                      options.lock_holder,
                                      options.share_work_dir ? base::FileLock::Sharing::kShared
                                                             : base::FileLock::Sharing::kExclusive);
  if (!lock.ok()) return lock.status();
  return std::unique_ptr<LocalPodRuntime>(
      new LocalPodRuntime(std::move(options), *std::move(lock)));
}

LocalPodRuntime::LocalPodRuntime(LocalPodRuntimeOptions options, base::FileLock work_dir_lock)
    : work_dir_lock_(std::move(work_dir_lock)),
      options_(std::move(options)),
      boot_id_(base::BootId().value_or("")),
      ports_(options_.work_dir, options_.port_range),
      epoll_(epoll_create1(EPOLL_CLOEXEC)),
      wakeup_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakeup_.get();
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wakeup_.get(), &ev);
  if (boot_id_.empty()) {
    spdlog::warn("cannot read this boot's id: pod records are trusted on pid and start time alone");
  }
  {
    absl::MutexLock lock(&mu_);  // no other thread yet; the analysis wants it held
    Load();
  }
  reaper_ = std::thread([this] { Reaper(); });
  writer_ = std::thread([this] { RecordWriter(); });
  monitor_ = std::thread([this] { Monitor(); });
}

LocalPodRuntime::~LocalPodRuntime() { Shutdown(); }

void LocalPodRuntime::Load() {
  if (auto table = ports_.Load(); table.ok()) {
    for (const auto& [volume, p] : *table) nfs_ports_[volume] = p.nfs;
  } else {
    spdlog::warn("{}", table.status().message());
  }
  // What cannot be read is not "no pods": a pod the runtime cannot see must
  // never be taken for gone (its replacement would be a second server).
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator volumes(options_.work_dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    load_error_ = absl::StrCat("cannot list ", options_.work_dir, ": ", ec.message());
    return;
  }
  for (; !ec && volumes != fs::directory_iterator(); volumes.increment(ec)) {
    const fs::directory_entry& volume_dir = *volumes;
    const auto pods_dir = volume_dir.path() / "pods";
    const std::string volume = volume_dir.path().filename();
    std::error_code pods_ec;
    if (!fs::is_directory(pods_dir, pods_ec)) {
      if (pods_ec && pods_ec != std::errc::no_such_file_or_directory) {
        bad_records_[volume] = absl::StrCat(pods_dir.string(), ": ", pods_ec.message());
      }
      continue;
    }
    fs::directory_iterator entries(pods_dir, pods_ec);
    for (; !pods_ec && entries != fs::directory_iterator(); entries.increment(pods_ec)) {
      const fs::directory_entry& entry = *entries;
      if (entry.path().extension() != ".pod") continue;
      auto text = base::ReadFile(entry.path());
      absl::StatusOr<PodRecord> record = text.ok() ? ParseRecord(*text) : text.status();
      if (record.ok() && record->pod.volume != volume) {
        record = absl::DataLossError("record of another volume");
      }
      if (!record.ok()) {
        bad_records_[volume] = absl::StrCat(entry.path().string(), ": ", record.status().message());
        continue;
      }
      LocalPod local = Adopt(*record, entry.path(), volume_dir.path());
      if (auto [it, inserted] = pods_.try_emplace(local.pod.name); inserted) {
        it->second = std::move(local);
      } else {
        Merge(it->second, std::move(local));
      }
    }
    if (pods_ec) bad_records_[volume] = absl::StrCat(pods_dir.string(), ": ", pods_ec.message());
  }
  if (ec) load_error_ = absl::StrCat("cannot list ", options_.work_dir, ": ", ec.message());
  // A delete is recorded before its SIGTERM is sent: the last runtime may
  // have died in between. A share-manager stopping already ignores another.
  // Its grace starts now, as if the delete were asked for now (a delete
  // carried over by Merge included): SIGTERM always comes first, and the
  // SIGKILL no sooner than a grace after it.
  for (auto& [name, local] : pods_) {
    if (!local.deleting || !local.share_manager_alive) continue;
    local.term_started = SteadyClock::now();
    SignalShareManager(local);
  }
  // A dead share-manager's ganesha, named by its volume's ganesha.pid, only
  // now that every record is adopted: in the order of the directory, a live
  // pod that tracks that ganesha might not be known yet.
  for (auto& [name, local] : pods_) Refresh(local);
}

LocalPodRuntime::LocalPod LocalPodRuntime::Adopt(const PodRecord& record, std::string path,
                                                 const std::string& volume_dir) {
  LocalPod local;
  local.pod = record.pod;
  local.pid = record.pid;
  local.start_ticks = record.start_ticks;
  // An older record: what the runtime's own flags would have given it.
  local.stop_timeout = record.stop_timeout.value_or(StopTimeout(options_.daemon_flags));
  local.grace = Grace(local.stop_timeout);
  local.record_path = std::move(path);
  local.slot = SlotFor(local.pod.name);
  local.instance = ++next_instance_;
  // The pid is the pod's only in the boot the record was written in (start
  // ticks count from boot) and if it still started when the record says:
  // after a reboot or a pid reuse it is someone else, never signalled.
  // Records without a boot id (older ones) have only the start time.
  const bool other_boot =
      !record.boot_id.empty() && !boot_id_.empty() && record.boot_id != boot_id_;
  if (!other_boot) {
    if (base::ProcessAlive(local.pid, local.start_ticks) && RunsWithUid(local.pid, local.pod.uid)) {
      AddProc(local, local.pid, local.start_ticks);
      local.share_manager_alive = !local.procs.empty();
    }
    // The rest of its tree as last recorded (a filesystem check may outlive
    // the share-manager), each only while its start time still matches.
    for (auto [pid, start] : record.procs) {
      if (pid != local.pid) AddProc(local, pid, start);
    }
  }
  if (record.delete_started) {
    // Goes on where the last runtime was: its grace counts from then (never
    // from a time to come, were the record's clock not this boot's). A live
    // share-manager may never have had its SIGTERM (the last runtime may have
    // died first): Load sends it one and its grace starts over then, so no
    // SIGKILL comes before its stop timeout (the wait only gets longer).
    local.deleting = true;
    local.term_started = local.share_manager_alive
                             ? SteadyClock::now()
                             : std::min(*record.delete_started, SteadyClock::now());
  }
  local.pod.phase = local.share_manager_alive ? PodPhase::kRunning : PodPhase::kFailed;
  local.pod.exit_code = -1;  // not our child: its exit status cannot be known
  // Without its state dir yet: a ganesha.pid is looked up (Load's second
  // pass) only once every pod of the volume is known, and tracks what it
  // tracks.
  Refresh(local);
  // In another boot, a ganesha running now is not this pod's either.
  if (!other_boot) local.state_dir = volume_dir + "/state";
  spdlog::info("pod {}: {} (pid {}, {} live process(es){})", local.pod.name,
               local.share_manager_alive ? "adopted"
               : other_boot              ? "found gone (recorded in another boot)"
               : local.procs.empty()     ? "found gone"
                                         : "found without its share-manager",
               local.pid, local.procs.size(), local.deleting ? ", deleting" : "");
  return local;
}

void LocalPodRuntime::Merge(LocalPod& kept, LocalPod other) {
  // Live processes first: a record naming only dead ones may go, one naming
  // live ones must stay deletable. Then the newer epoch.
  auto rank = [](const LocalPod& l) {
    return std::tuple(l.share_manager_alive, !l.procs.empty(), l.pod.epoch);
  };
  if (rank(other) > rank(kept)) std::swap(kept, other);
  // Either record's share-manager may be the one still stopping: the longer
  // wait of the two.
  kept.stop_timeout = std::max(kept.stop_timeout, other.stop_timeout);
  kept.grace = std::max(kept.grace, other.grace);
  // A delete under way in either record goes on: its earliest start counts.
  if (other.deleting) {
    kept.term_started =
        kept.deleting ? std::min(kept.term_started, other.term_started) : other.term_started;
    kept.deleting = true;
  }
  spdlog::error(
      "pod {}: two records name it, {} and {}: keeping {} (pid {}); the other's {} live "
      "process(es) are the pod's too (signalled by its delete), and its record goes once the "
      "kept one lists them",
      kept.pod.name, kept.record_path, other.record_path, kept.record_path, kept.pid,
      other.procs.size());
  for (auto& p : other.procs) {
    const bool known = std::any_of(kept.procs.begin(), kept.procs.end(),
                                   [&](const Proc& k) { return k.pid == p.pid; });
    if (known) {
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, p.pidfd.get(), nullptr);
    } else {
      kept.procs.push_back(std::move(p));
    }
  }
  kept.superseded_records.push_back(other.record_path);
  kept.superseded_records.insert(kept.superseded_records.end(), other.superseded_records.begin(),
                                 other.superseded_records.end());
  kept.pod.terminating = kept.deleting && !kept.procs.empty();
  // Its record says all this before the other's goes (see Apply).
  kept.record_stale = true;
}

void LocalPodRuntime::AddProc(LocalPod& local, pid_t pid, uint64_t start_ticks) {
  for (const auto& p : local.procs) {
    if (p.pid == pid) return;
  }
  base::UniqueFd pidfd(PidfdOpen(pid));
  // Opened after the start-time check: confirm it still names that process.
  if (!pidfd || !base::ProcessAlive(pid, start_ticks)) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = pidfd.get();
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, pidfd.get(), &ev);
  local.procs.push_back({pid, start_ticks, std::move(pidfd)});
  local.record_stale = true;
}

bool LocalPodRuntime::OrphanedGaneshaOf(const LocalPod& local, pid_t pid,
                                        const base::ProcStat& st) const {
  if (st.comm.find("ganesha") == std::string::npos || st.start_ticks < local.start_ticks) {
    return false;
  }
  // Another pod's (the state dir is the volume's, shared by its epochs): it
  // tracks it, as a child it saw or from its record.
  for (const auto& [name, other] : pods_) {
    if (&other == &local) continue;
    for (const auto& p : other.procs) {
      if (p.pid == pid) return false;
    }
  }
  // An orphan, as the pod's ganesha is once its share-manager died: the
  // kernel handed it to init or to a subreaper, which can only be one of the
  // processes the share-manager descended from, as it was spawned here (this
  // process or an ancestor of it). A live parent that is none of these (a
  // live share-manager of another pod, a reuser of the pod's pid) means it is
  // someone else's; so does the dead share-manager's pid itself, which only a
  // stranger can hold now.
  return st.ppid == 1 || IsSelfOrAncestor(st.ppid);
}

bool LocalPodRuntime::Refresh(LocalPod& local) {
  const PodPhase phase = local.pod.phase;
  const bool terminating = local.pod.terminating;
  const size_t exited = std::erase_if(local.procs, [&](const Proc& p) {
    if (!Exited(p.pidfd.get())) return false;
    if (p.pid == local.pid) local.share_manager_alive = false;
    // Removed explicitly: closing this fd alone would not drop it from epoll
    // while another fd shares its file (the child's own pidfd, kept until the
    // reaper thread reaps it), and an exited pidfd stays readable: the monitor
    // would spin.
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, p.pidfd.get(), nullptr);
    return true;
  });
  if (exited > 0) local.record_stale = true;
  if (local.child && !local.share_manager_alive) {
    // Its exit is known now; the reap, which can take the kernel a long
    // time, waits on the reaper thread and holds nothing up.
    auto exit = local.child->ExitStatus();
    local.pod.exit_code = exit.ok() ? exit->ShellCode() : -1;
    ReapLater(*std::move(local.child));
    local.child.reset();
  }
  if (local.share_manager_alive || local.deleting) {
    // Its children (ganesha, a filesystem check) live in their own groups and
    // outlive it briefly at least: remember them while they can be found.
    // While it is deleted, those of its other processes too (one that forks
    // after its share-manager died), so the delete's SIGKILL reaches them.
    std::vector<pid_t> parents;
    if (local.share_manager_alive) parents.push_back(local.pid);
    for (const auto& p : local.procs) {
      if (p.pid != local.pid) parents.push_back(p.pid);
    }
    for (pid_t parent : parents) {
      for (pid_t c : base::ProcessChildren(parent)) {
        if (auto st = base::ReadProcStat(c); st && st->start_ticks >= local.start_ticks) {
          AddProc(local, c, st->start_ticks);
        }
      }
    }
  } else if (!local.state_dir.empty()) {
    // The share-manager is gone (perhaps before we ever saw its children, or
    // before this runtime started): its ganesha may remain, named by the
    // state dir's pid file (the volume's, shared by all its pods).
    if (auto text = base::ReadFile(local.state_dir + "/ganesha.pid"); text.ok()) {
      pid_t g = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &g)) {
        const auto st = base::ReadProcStat(g);
        if (st && OrphanedGaneshaOf(local, g, *st)) AddProc(local, g, st->start_ticks);
      }
    }
    local.state_dir.clear();  // looked once: a later ganesha.pid belongs to another pod
  }
  if (!local.share_manager_alive) {
    local.pod.phase =
        local.pod.exit_code == 0 && local.procs.empty() ? PodPhase::kSucceeded : PodPhase::kFailed;
    // Still-running orphans make it Failed whatever the exit code said.
  }
  if (local.deleting) {
    if (!local.share_manager_alive && !local.orphans_termed) {
      // Nothing will stop the orphans in order any more.
      local.orphans_termed = true;
      SignalAll(local, SIGTERM);
    }
    // After the grace, SIGKILL; again on each pass while a process found
    // since (a child forked meanwhile) remains.
    const bool unkilled = std::any_of(local.procs.begin(), local.procs.end(),
                                      [](const Proc& p) { return !p.sigkilled; });
    if (unkilled && SteadyClock::now() - local.term_started >= local.grace) {
      const bool first = !local.killed;
      local.killed = true;
      const auto checks = SignalAll(local, SIGKILL);
      for (auto& p : local.procs) p.sigkilled = true;
      if (first && !checks.empty()) {
        spdlog::warn(
            "pod {}: a filesystem check is still running (pid {}); it got SIGTERM and never gets "
            "SIGKILL (killed mid-write it can corrupt the filesystem): the pod stays terminating "
            "until the check ends",
            local.pod.name, absl::StrJoin(checks, ", "));
      }
    }
  }
  local.pod.terminating = local.deleting && !local.procs.empty();
  // Gone: the monitor removes it. When List or Delete saw the last exit, the
  // pidfd that would have woken the monitor is closed already; wake it here
  // rather than leave the pod listed until its next periodic pass.
  if (local.deleting && local.procs.empty()) Wake();
  return phase != local.pod.phase || terminating != local.pod.terminating;
}

std::vector<pid_t> LocalPodRuntime::SignalAll(LocalPod& local, int sig) {
  std::vector<pid_t> spared;
  // Checks met in a group and not tracked yet: tracked from now on, so the
  // pod stays listed while they run.
  std::vector<std::pair<pid_t, uint64_t>> found;
  for (const auto& p : local.procs) {
    if (Exited(p.pidfd.get())) continue;
    if (sig != SIGKILL) {
      if (sig == SIGTERM) SignalWithGroup(p.pid, p.pidfd.get(), SIGCONT);  // frozen: see it
      SignalWithGroup(p.pid, p.pidfd.get(), sig);
      continue;
    }
    if (getpgid(p.pid) == p.pid) {
      std::vector<std::pair<pid_t, uint64_t>> members, checks;
      for (pid_t m : base::ProcessGroupMembers(p.pid)) {
        if (auto st = base::ReadProcStat(m); st && st->pgrp == p.pid) {
          (IsFilesystemCheck(st->comm) ? checks : members).emplace_back(m, st->start_ticks);
        }
      }
      if (checks.empty()) {
        SignalGroup(p.pid, p.pidfd.get(), SIGKILL);
      } else {
        // The group's SIGKILL would reach the check: its members get theirs
        // one by one, through pidfds (a member gone since the scan is skipped,
        // its pid never hit).
        for (auto [m, start] : members) {
          base::UniqueFd fd(PidfdOpen(m));
          if (fd && base::ProcessAlive(m, start)) PidfdSignal(fd.get(), SIGKILL);
        }
        for (auto [c, start] : checks) {
          if (start >= local.start_ticks) found.emplace_back(c, start);
        }
      }
    }
    const auto st = base::ReadProcStat(p.pid);
    if (st && st->start_ticks == p.start_ticks && IsFilesystemCheck(st->comm)) {
      spared.push_back(p.pid);
    } else {
      PidfdSignal(p.pidfd.get(), SIGKILL);
    }
  }
  for (auto [pid, start] : found) {
    AddProc(local, pid, start);
    if (std::find(spared.begin(), spared.end(), pid) == spared.end()) spared.push_back(pid);
  }
  return spared;
}

void LocalPodRuntime::Shutdown() { Stop(options_.stop_pods_on_exit || options_.ephemeral); }

void LocalPodRuntime::ShutdownLeavingPods() { Stop(false); }

void LocalPodRuntime::Stop(bool delete_pods) {
  if (!monitor_.joinable()) return;
  std::vector<std::string> names;
  std::chrono::milliseconds longest_grace{0};
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    // A Create under way would add its pod after we listed them; a Delete
    // under way would write its record and signal after we stopped.
    auto created = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return creating_ == 0 && deleting_calls_ == 0;
    };
    mu_.Await(absl::Condition(&created));
    if (delete_pods) {
      for (const auto& [name, local] : pods_) {
        names.push_back(name);
        longest_grace = std::max(longest_grace, local.grace);
      }
    }
  }
  for (const auto& name : names) (void)DeletePod(name);
  {
    absl::MutexLock lock(&mu_);
    auto gone = [this, &names]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const auto& name : names) {
        if (pods_.contains(name)) return false;
      }
      return true;
    };
    // Every pod gets its SIGKILL at its own grace; then a margin to die.
    const auto timeout = longest_grace + std::chrono::seconds(15);
    if (!mu_.AwaitWithTimeout(absl::Condition(&gone), absl::FromChrono(timeout))) {
      spdlog::error("some pods did not die within {} ms", timeout.count());
    }
    stop_ = true;
  }
  Wake();
  monitor_.join();
  {
    // Changes since the monitor's last pass: the next runtime adopts from
    // the records. The writer applies them, then stops.
    absl::MutexLock lock(&mu_);
    for (auto& write : TakeStaleRecords()) record_jobs_.push_back(std::move(write));
    writer_stop_ = true;
  }
  writer_.join();
  {
    absl::MutexLock lock(&reap_mu_);
    reaper_stop_ = true;
  }
  reaper_.join();
}

void LocalPodRuntime::ReapLater(supervisor::ChildProcess child) {
  absl::MutexLock lock(&reap_mu_);
  unreaped_.push_back(std::move(child));
}

void LocalPodRuntime::Reaper() {
  for (;;) {
    std::vector<supervisor::ChildProcess> exited;
    {
      absl::MutexLock lock(&reap_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(reap_mu_) {
        return reaper_stop_ || !unreaped_.empty();
      };
      reap_mu_.Await(absl::Condition(&ready));
      if (unreaped_.empty()) return;  // stopping, and every child reaped
      exited.swap(unreaped_);
    }
    for (auto& child : exited) {
      const pid_t pid = child.pid();
      if (auto reaped = child.Reap(); !reaped.ok()) {
        spdlog::warn("share-manager {}: cannot reap it: {}", pid, reaped.status().message());
      }
    }
  }
}

void LocalPodRuntime::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] auto n = write(wakeup_.get(), &one, sizeof(one));
}

absl::StatusOr<Pod> LocalPodRuntime::Create(const sharemanager::controller::v1::ShareSpec& spec,
                                            uint64_t epoch) {
  // The volume names a directory under the work dir: never "..", a path or
  // anything else ValidateVolumeName refuses.
  if (auto valid = base::ValidateVolumeName(spec.volume()); !valid.ok()) return valid;
  const std::string volume_dir = absl::StrCat(options_.work_dir, "/", spec.volume());
  Pod pod{.name = PodName(spec.volume(), epoch),
          .volume = spec.volume(),
          .epoch = epoch,
          .uid = NewPodUid()};
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::FailedPreconditionError("the pod runtime is shutting down");
    // Reserved until it is in pods_: two Creates of one name must not both
    // start a share-manager (the second would overwrite the first's entry).
    if (pods_.contains(pod.name) || !creating_names_.insert(pod.name).second) {
      return absl::AlreadyExistsError(pod.name + " exists");
    }
    ++creating_;
  }
  auto done = [this, name = pod.name] {
    absl::MutexLock lock(&mu_);
    creating_names_.erase(name);
    --creating_;
  };
  if (auto s = base::EnsureDirectory(volume_dir + "/pods", 0755); !s.ok()) {
    done();
    return s;
  }
  auto ports = ports_.Get(spec.volume());
  if (!ports.ok()) {
    done();
    return ports.status();
  }
  pod.endpoint = absl::StrCat("127.0.0.1:", ports->grpc);
  pod.nfs_port = ports->nfs;
  // The pod writes its log itself (appending), not through us: no disk write
  // happens under our lock, and the pod keeps logging after we are gone.
  const std::string log = absl::StrCat(volume_dir, "/", pod.name, ".log");
  std::vector<std::string> daemon = {
      options_.share_manager_binary, "daemon",
      // The pod's own place (volume, epoch, directories, ports); flags follow.
      "--volume", spec.volume(), "--epoch", std::to_string(epoch), "--export-dir",
      volume_dir + "/export", "--state-dir", volume_dir + "/state", "--nfs-address", "127.0.0.1",
      "--nfs-port", std::to_string(pod.nfs_port), "--listen", pod.endpoint, "--pod-uid", pod.uid,
      // No kubelet probes local pods (the controller asks the gRPC port), and
      // the default 0.0.0.0:9601 would be one port for every pod.
      "--health-listen", "none"};
  daemon.insert(daemon.end(), options_.daemon_flags.begin(), options_.daemon_flags.end());
  daemon.insert(daemon.end(), spec.daemon_flags().begin(), spec.daemon_flags().end());
  // What the daemon will use: the last --stop-timeout wins, the share's own included.
  const std::chrono::milliseconds stop_timeout = StopTimeout(daemon);
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   // Waits for "go" (sent once the pod is recorded);
                                   // EOF (the controller died first) ends it.
                                   "read -r go && [ \"$go\" = go ] || exit 1; "
                                   "log=$1; shift; exec \"$@\" </dev/null >>\"$log\" 2>&1",
                                   "sh", log};
  argv.insert(argv.end(), daemon.begin(), daemon.end());
  if (options_.share_manager_binary.find('/') != std::string::npos &&
      access(options_.share_manager_binary.c_str(), X_OK) != 0) {
    done();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute ", options_.share_manager_binary, ": ", strerror(errno)));
  }
  // The pod starts held: its share-manager is exec'd only once the record
  // below exists, so a controller that dies in between leaves no unrecorded
  // server (the held shell sees EOF and exits).
  int gate[2];
  if (pipe2(gate, O_CLOEXEC) != 0) {
    done();
    return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
  }
  base::UniqueFd gate_read(gate[0]), gate_write(gate[1]);
  auto process = SpawnOnMonitor(argv, gate_read.get());
  gate_read.reset();
  if (!process.ok()) {
    done();
    return process.status();
  }
  // Until the gate opens, whatever fails ends what was started: no record,
  // no process left.
  auto abandon = [&](absl::Status status) {
    EndHeld(*process, std::move(gate_write));
    done();
    return status;
  };
  LocalPod local;
  local.pid = process->pid();
  // Our unreaped child: its stat (even as a zombie) is there, unless /proc
  // fails us. Without its start time no runtime could ever tell the pod from
  // a process that reuses its pid, nor would a record accept it: no pod
  // rather than one that cannot be verified. (No seam makes /proc fail in a
  // test: the record's side is tested, a start time of 0 refused on load.)
  const auto stat = base::ReadProcStat(local.pid);
  if (!stat) {
    return abandon(absl::UnavailableError(
        absl::StrCat("pod ", pod.name, ": cannot read the start time of its process ", local.pid,
                     " in /proc, without which it could not be told from a reused pid")));
  }
  local.start_ticks = stat->start_ticks;
  pod.started_unix_ms = base::StartTicksToUnixMs(local.start_ticks);
  pod.phase = PodPhase::kRunning;
  local.pod = pod;
  local.record_path = absl::StrCat(volume_dir, "/pods/", pod.name, ".pod");
  local.state_dir = volume_dir + "/state";
  local.stop_timeout = stop_timeout;
  local.grace = Grace(stop_timeout);
  // A copy of the child's own pidfd (no new pidfd_open that could fail
  // under fd pressure and leave the pod "running" for ever).
  local.procs.push_back(
      {local.pid, local.start_ticks, base::UniqueFd(fcntl(process->pidfd(), F_DUPFD_CLOEXEC, 0))});
  local.share_manager_alive = true;
  // Recorded before Create returns: a controller that restarts from here on
  // finds the pod instead of reading its absence as "gone".
  // Not fsynced (see Snapshot).
  RecordWrite record;
  {
    // Versioned after the removal of a gone pod's record of this name (it
    // left pods_ before the name was reserved): that removal, when it comes
    // later, spares this record.
    absl::MutexLock lock(&mu_);
    local.slot = SlotFor(pod.name);
    local.instance = ++next_instance_;
    record = Snapshot(local);
  }
  if (auto recorded = Apply(record); !recorded.ok()) return abandon(recorded);
  if (write(gate_write.get(), "go\n", 3) != 3) {
    spdlog::warn("pod {}: could not release it ({}); it exits and is seen gone", pod.name,
                 strerror(errno));
  }
  gate_write.reset();
  local.child = *std::move(process);
  {
    absl::MutexLock lock(&mu_);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = local.procs.front().pidfd.get();
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, ev.data.fd, &ev);
    nfs_ports_[pod.volume] = pod.nfs_port;
    pods_[pod.name] = std::move(local);
    creating_names_.erase(pod.name);  // in pods_ now: reserved by that alone
    --creating_;
  }
  Wake();
  listeners_.Notify(pod.volume);
  return pod;
}

absl::StatusOr<supervisor::ChildProcess> LocalPodRuntime::SpawnOnMonitor(
    const std::vector<std::string>& argv, int stdin_fd) {
  // On the monitor thread: a PR_SET_PDEATHSIG follows the thread that forked,
  // and ephemeral pods must live as long as the runtime, not as long as
  // whichever controller worker created them.
  const int death_signal = options_.ephemeral ? SIGKILL : 0;
  auto task = std::make_shared<std::packaged_task<absl::StatusOr<supervisor::ChildProcess>()>>(
      [argv, death_signal, stdin_fd] {
        return supervisor::ChildProcess::Spawn(argv, death_signal, stdin_fd);
      });
  auto result = task->get_future();
  {
    absl::MutexLock lock(&mu_);
    tasks_.push_back([task] { (*task)(); });
  }
  Wake();
  return result.get();
}

void LocalPodRuntime::Monitor() {
  epoll_event events[16];
  for (;;) {
    // Exits wake us through the pidfds; the timeout finds new children (a
    // ganesha restarted in place) and ends termination graces.
    const int n = epoll_wait(epoll_.get(), events, 16, 100);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wakeup_.get()) {
        uint64_t count;
        [[maybe_unused]] auto r = read(wakeup_.get(), &count, sizeof(count));
      }
    }
    std::vector<std::function<void()>> tasks;
    {
      absl::MutexLock lock(&mu_);
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) task();
    std::vector<std::string> changed;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      for (auto it = pods_.begin(); it != pods_.end();) {
        LocalPod& local = it->second;
        if (Refresh(local)) changed.push_back(local.pod.volume);
        if (local.deleting && local.procs.empty()) {
          changed.push_back(local.pod.volume);
          // The record goes only once every process is gone: until then a
          // restart must still find the pod.
          record_jobs_.push_back(Forget(it++));
        } else {
          ++it;
        }
      }
      for (auto& write : TakeStaleRecords()) record_jobs_.push_back(std::move(write));
    }
    for (const auto& volume : changed) listeners_.Notify(volume);
  }
}

LocalPodRuntime::RecordWrite LocalPodRuntime::Forget(std::map<std::string, LocalPod>::iterator it) {
  LocalPod& local = it->second;
  RecordWrite removal{.name = local.pod.name,
                      .instance = local.instance,
                      .slot = local.slot,
                      .version = ++record_version_,
                      .unlinks = std::move(local.superseded_records)};
  removal.unlinks.push_back(local.record_path);
  pods_.erase(it);
  return removal;
}

std::string LocalPodRuntime::RecordText(const LocalPod& local) const {
  PodRecord record{.pod = local.pod,
                   .pid = local.pid,
                   .start_ticks = local.start_ticks,
                   .stop_timeout = local.stop_timeout,
                   .boot_id = boot_id_};
  for (const auto& p : local.procs) record.procs.emplace_back(p.pid, p.start_ticks);
  if (local.deleting || local.delete_recording) record.delete_started = local.term_started;
  return FormatRecord(record);
}

std::shared_ptr<LocalPodRuntime::RecordSlot> LocalPodRuntime::SlotFor(const std::string& name) {
  std::erase_if(slots_, [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<RecordSlot>& entry = slots_[name];
  std::shared_ptr<RecordSlot> slot = entry.lock();
  if (!slot) {
    slot = std::make_shared<RecordSlot>();
    entry = slot;
  }
  return slot;
}

LocalPodRuntime::RecordWrite LocalPodRuntime::Snapshot(LocalPod& local) {
  local.record_stale = false;
  const bool deleting = local.deleting || local.delete_recording;
  return {.name = local.pod.name,
          .instance = local.instance,
          .slot = local.slot,
          .version = ++record_version_,
          .path = local.record_path,
          .text = RecordText(local),
          // A delete must outlive the machine: a pod that comes back after a
          // crash is still being deleted. Otherwise the record must outlive
          // the controller process, not the machine (a reboot ends the pod,
          // its pid and start time with it).
          .durability = deleting ? base::Durability::kFsync : base::Durability::kReplaced,
          .deleting = deleting,
          .unlinks = local.superseded_records};
}

std::vector<LocalPodRuntime::RecordWrite> LocalPodRuntime::TakeStaleRecords() {
  std::vector<RecordWrite> writes;
  for (auto& [name, local] : pods_) {
    if (!local.record_stale || local.record_queued) continue;
    local.record_queued = true;
    writes.push_back(Snapshot(local));
    writes.back().queued = true;
  }
  return writes;
}

absl::Status LocalPodRuntime::Apply(const RecordWrite& write) {
  RecordSlot& slot = *write.slot;
  absl::MutexLock lock(&slot.mu);
  if (write.version < slot.landed) {
    // A newer state of the pod landed, or its removal, or a new pod of its
    // name: this one is out of date. A removal still removes the old pod's
    // records, the new pod's excepted.
    if (!write.text) {
      for (const auto& path : write.unlinks) {
        if (path != slot.landed_path) unlink(path.c_str());
      }
    }
    return absl::OkStatus();
  }
  if (!write.text) {
    for (const auto& path : write.unlinks) unlink(path.c_str());
    slot.landed = write.version;
    slot.landed_path.clear();
    slot.landed_deleting = false;
    return absl::OkStatus();
  }
  if (auto written = WriteRecordFile(write.path, *write.text, write.durability); !written.ok()) {
    // Tried again on every monitor pass (100 ms) while it fails: said once,
    // then now and then.
    constexpr auto kLogEvery = std::chrono::seconds(30);
    const auto now = SteadyClock::now();
    if (++slot.failures == 1 || now - slot.failure_logged >= kLogEvery) {
      slot.failure_logged = now;
      spdlog::error(
          "pod {}: cannot update its record ({} failed attempt(s); tried again, logged at most "
          "every {} s): {}",
          write.name, slot.failures, kLogEvery.count(), written.message());
    }
    return absl::Status(written.code(),
                        absl::StrCat("cannot write ", write.path, ": ", written.message()));
  }
  if (slot.failures > 0) {
    spdlog::info("pod {}: its record is written again, after {} failed attempt(s)", write.name,
                 slot.failures);
    slot.failures = 0;
  }
  slot.landed = write.version;
  slot.landed_path = write.path;
  slot.landed_deleting = write.deleting;
  // This record names every process the superseded ones did.
  for (const auto& path : write.unlinks) unlink(path.c_str());
  return absl::OkStatus();
}

void LocalPodRuntime::Settle(const RecordWrite& write, const absl::Status& status) {
  auto it = pods_.find(write.name);
  if (it == pods_.end() || it->second.instance != write.instance || !write.text) return;
  LocalPod& local = it->second;
  if (write.queued) local.record_queued = false;
  if (!status.ok()) {
    local.record_stale = true;  // the monitor's next pass tries again
    return;
  }
  // Landed, or a newer write that replaced the same records did.
  std::erase_if(local.superseded_records, [&](const std::string& path) {
    return std::find(write.unlinks.begin(), write.unlinks.end(), path) != write.unlinks.end();
  });
  if (write.deleting && !local.deleting && !local.delete_recording) {
    // Its delete is on disk although Delete's own write failed.
    BeginDelete(local);
    Wake();
  }
}

void LocalPodRuntime::RecordWriter() {
  for (;;) {
    std::vector<RecordWrite> jobs;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return writer_stop_ || !record_jobs_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (record_jobs_.empty()) return;  // stopping, and every job done
      jobs.swap(record_jobs_);
    }
    for (const auto& job : jobs) {
      const absl::Status status = Apply(job);
      absl::MutexLock lock(&mu_);
      Settle(job, status);
    }
  }
}

absl::Status LocalPodRuntime::WriteRecordFile(const std::string& path, const std::string& text,
                                              base::Durability durability) const {
  if (options_.write_record) return options_.write_record(path, text, durability);
  return base::WriteFileAtomically(path, text, 0644, durability);
}

absl::Status LocalPodRuntime::Delete(const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::FailedPreconditionError("the pod runtime is shutting down");
    ++deleting_calls_;
  }
  const absl::Status status = DeletePod(name);
  absl::MutexLock lock(&mu_);
  --deleting_calls_;
  return status;
}

absl::Status LocalPodRuntime::DeletePod(const std::string& name) {
  std::string volume;
  RecordWrite write;
  {
    absl::MutexLock lock(&mu_);
    auto it = pods_.find(name);
    if (it == pods_.end()) return absl::OkStatus();
    LocalPod& local = it->second;
    Refresh(local);
    volume = local.pod.volume;
    if (local.procs.empty()) {
      write = Forget(it);
    } else if (local.deleting) {
      return absl::UnavailableError(absl::StrCat(
          "pod ", name, " is terminating: ", local.procs.size(), " process(es) left after ",
          std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() -
                                                                local.term_started)
              .count(),
          " ms"));
    } else if (local.delete_recording) {
      return absl::UnavailableError(
          absl::StrCat("pod ", name, ": its delete is being recorded (another Delete)"));
    } else {
      // Recorded before anything is signalled: a runtime that adopts the pod
      // (this one died meanwhile) goes on with the delete.
      local.delete_recording = true;
      local.term_started = SteadyClock::now();
      write = Snapshot(local);
    }
  }
  absl::Status recorded = Apply(write);
  if (!recorded.ok()) {
    // A newer write saying "deleting" (the monitor's, snapshotted while this
    // one was recorded) may have landed meanwhile: then the delete is on
    // disk, and goes on.
    absl::MutexLock lock(&write.slot->mu);
    if (write.slot->landed > write.version && write.slot->landed_deleting) {
      recorded = absl::OkStatus();
    }
  }
  if (write.text) {
    absl::MutexLock lock(&mu_);
    Settle(write, recorded);
    auto it = pods_.find(name);
    if (it == pods_.end() || it->second.instance != write.instance) return absl::OkStatus();
    LocalPod& local = it->second;
    local.delete_recording = false;
    if (!recorded.ok()) {
      return absl::Status(recorded.code(), absl::StrCat("pod ", name,
                                                        ": cannot record its delete, so it was not "
                                                        "begun (nothing signalled): ",
                                                        recorded.message()));
    }
    BeginDelete(local);
  }
  Wake();
  listeners_.Notify(volume);
  return absl::OkStatus();
}

void LocalPodRuntime::BeginDelete(LocalPod& local) {
  local.deleting = true;
  // The grace counts from the SIGTERM (the record has when the delete was
  // asked for, earlier by its write; an adopting runtime starts the grace
  // over when the share-manager lives, see Adopt).
  local.term_started = SteadyClock::now();
  local.pod.terminating = true;
  // The share-manager stops its ganesha in order; its orphans, and
  // everything after the grace, are signalled by the monitor.
  if (local.share_manager_alive) SignalShareManager(local);
}

void LocalPodRuntime::SignalShareManager(LocalPod& local) {
  for (const auto& p : local.procs) {
    if (p.pid != local.pid) continue;
    SignalWithGroup(p.pid, p.pidfd.get(), SIGCONT);  // a frozen pod must see its SIGTERM
    SignalWithGroup(p.pid, p.pidfd.get(), SIGTERM);
  }
}

absl::StatusOr<std::vector<Pod>> LocalPodRuntime::List(const std::string& volume) {
  std::vector<Pod> out;
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    if (!load_error_.empty()) return absl::DataLossError(load_error_);
    if (auto bad = bad_records_.find(volume); bad != bad_records_.end()) {
      return absl::DataLossError(absl::StrCat("unreadable pod record ", bad->second));
    }
    for (auto& [name, local] : pods_) {
      if (local.pod.volume != volume) continue;
      changed |= Refresh(local);  // /proc only: never the disk
      out.push_back(local.pod);
    }
  }
  if (changed) listeners_.Notify(volume);
  return out;
}

void LocalPodRuntime::Watch(Listener listener) { listeners_.Add(std::move(listener)); }

uint16_t LocalPodRuntime::NfsPort(const std::string& volume) const {
  absl::MutexLock lock(&mu_);
  auto it = nfs_ports_.find(volume);
  return it == nfs_ports_.end() ? 0 : it->second;
}

std::chrono::milliseconds LocalPodRuntime::TerminationGrace(const std::string& pod) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(pod);
  return it == pods_.end() ? std::chrono::milliseconds(0) : it->second.grace;
}

std::chrono::milliseconds LocalPodRuntime::Grace(std::chrono::milliseconds stop_timeout) const {
  // The share-manager always gets to stop its ganesha itself first.
  return options_.termination_grace.count() > 0 ? options_.termination_grace
                                                : stop_timeout * 2 + std::chrono::seconds(5);
}

pid_t LocalPodRuntime::Pid(const std::string& pod) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(pod);
  return it == pods_.end() ? -1 : it->second.pid;
}

}  // namespace controller
