#include "controller/local_pod_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <future>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/loopback_port.h"

namespace controller {
namespace {

// epoll data: the pidfd or output fd number, with the kind in the top bit.
constexpr uint64_t kOutputBit = 1ull << 63;

}  // namespace

LocalPodRuntime::LocalPodRuntime(LocalPodRuntimeOptions options)
    : options_(std::move(options)),
      epoll_(epoll_create1(EPOLL_CLOEXEC)),
      wakeup_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<uint64_t>(wakeup_.get());
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wakeup_.get(), &ev);
  monitor_ = std::thread([this] { Monitor(); });
}

LocalPodRuntime::~LocalPodRuntime() { Shutdown(); }

void LocalPodRuntime::Shutdown() {
  if (!monitor_.joinable()) return;
  std::vector<std::string> names;
  {
    std::unique_lock lock(mu_);
    closing_ = true;
    // A Create under way would add its pod after we listed them.
    creates_cv_.wait(lock, [this] { return creating_ == 0; });
    for (const auto& [name, pod] : pods_) names.push_back(name);
  }
  for (const auto& name : names) (void)Delete(name);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  [[maybe_unused]] auto n = write(wakeup_.get(), &one, sizeof(one));
  monitor_.join();
}

absl::StatusOr<Pod> LocalPodRuntime::Create(const sharemanager::controller::v1::ShareSpec& spec,
                                            uint64_t epoch) {
  const std::string volume_dir = absl::StrCat(options_.work_dir, "/", spec.volume());
  if (auto s = base::EnsureDirectory(volume_dir, 0755); !s.ok()) return s;
  Pod pod{.name = PodName(spec.volume(), epoch), .volume = spec.volume(), .epoch = epoch};
  const uint16_t grpc_port = base::FreeLoopbackPort();
  pod.endpoint = absl::StrCat("127.0.0.1:", grpc_port);
  {
    std::lock_guard lock(mu_);
    if (closing_) return absl::FailedPreconditionError("the pod runtime is shutting down");
    if (pods_.contains(pod.name)) return absl::AlreadyExistsError(pod.name + " exists");
    auto& port = nfs_ports_[spec.volume()];
    if (port == 0) port = base::FreeLoopbackPort();
    pod.nfs_port = port;
    ++creating_;
  }
  std::vector<std::string> argv = {options_.share_manager_binary,
                                   "daemon",
                                   "--volume",
                                   spec.volume(),
                                   "--epoch",
                                   std::to_string(epoch),
                                   "--export-dir",
                                   volume_dir + "/export",
                                   "--state-dir",
                                   volume_dir + "/state",
                                   "--nfs-address",
                                   "127.0.0.1",
                                   "--nfs-port",
                                   std::to_string(pod.nfs_port),
                                   "--listen",
                                   pod.endpoint};
  argv.insert(argv.end(), options_.daemon_flags.begin(), options_.daemon_flags.end());
  argv.insert(argv.end(), spec.daemon_flags().begin(), spec.daemon_flags().end());
  const std::string log = absl::StrCat(volume_dir, "/", pod.name, ".log");
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  auto process = SpawnOnMonitor(argv);
  {
    std::lock_guard lock(mu_);
    if (--creating_ == 0) creates_cv_.notify_all();
    if (!process.ok()) {
      if (log_fd >= 0) close(log_fd);
      return process.status();
    }
    pod.phase = PodPhase::kRunning;
    auto& local = pods_[pod.name];
    local.pod = pod;
    local.log_fd = log_fd;
    local.process = std::move(*process);
    for (auto [fd, bit] : {std::pair{local.process->pidfd(), uint64_t{0}},
                           std::pair{local.process->output_fd(), kOutputBit}}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = static_cast<uint64_t>(fd) | bit;
      epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
    }
  }
  listeners_.Notify(pod.volume);
  return pod;
}

absl::StatusOr<supervisor::ChildProcess> LocalPodRuntime::SpawnOnMonitor(
    const std::vector<std::string>& argv) {
  auto task = std::make_shared<std::packaged_task<absl::StatusOr<supervisor::ChildProcess>()>>(
      [argv] { return supervisor::ChildProcess::Spawn(argv); });
  auto result = task->get_future();
  {
    std::lock_guard lock(mu_);
    tasks_.push_back([task] { (*task)(); });
  }
  const uint64_t one = 1;
  [[maybe_unused]] auto n = write(wakeup_.get(), &one, sizeof(one));
  return result.get();
}

void LocalPodRuntime::Monitor() {
  epoll_event events[16];
  char buf[8192];
  for (;;) {
    const int n = epoll_wait(epoll_.get(), events, 16, -1);
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard lock(mu_);
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) task();
    std::vector<std::string> exited;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      for (int i = 0; i < n; ++i) {
        const uint64_t data = events[i].data.u64;
        const int fd = static_cast<int>(data & ~kOutputBit);
        if (fd == wakeup_.get()) {
          uint64_t count;
          [[maybe_unused]] auto r = read(wakeup_.get(), &count, sizeof(count));
          continue;
        }
        for (auto& [name, local] : pods_) {
          if (!local.process) continue;
          if ((data & kOutputBit) && local.process->output_fd() == fd) {
            ssize_t got;
            while ((got = read(fd, buf, sizeof(buf))) > 0) {
              if (local.log_fd >= 0) {
                [[maybe_unused]] auto w = write(local.log_fd, buf, static_cast<size_t>(got));
              }
            }
            if (got == 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
          } else if (!(data & kOutputBit) && local.process->pidfd() == fd) {
            epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
            auto exit = local.process->Reap();
            local.pod.exit_code = exit.ok() ? exit->ShellCode() : -1;
            local.pod.phase = local.pod.exit_code == 0 ? PodPhase::kSucceeded : PodPhase::kFailed;
            exited.push_back(local.pod.volume);
          }
        }
      }
    }
    if (!exited.empty()) exit_cv_.notify_all();
    for (const auto& volume : exited) listeners_.Notify(volume);
  }
}

absl::Status LocalPodRuntime::Delete(const std::string& name) {
  std::unique_lock lock(mu_);
  auto it = pods_.find(name);
  if (it == pods_.end()) return absl::OkStatus();
  const std::string volume = it->second.pod.volume;
  auto dead = [&] {
    auto found = pods_.find(name);
    return found == pods_.end() || found->second.pod.phase == PodPhase::kSucceeded ||
           found->second.pod.phase == PodPhase::kFailed;
  };
  if (!dead()) {
    it->second.process->SignalGroup(SIGTERM);
    it->second.process->SignalGroup(SIGCONT);  // a frozen pod must see its SIGTERM
    if (!exit_cv_.wait_for(lock, options_.termination_grace, dead)) {
      pods_.at(name).process->SignalGroup(SIGKILL);
      if (!exit_cv_.wait_for(lock, std::chrono::seconds(10), dead)) {
        return absl::DeadlineExceededError(absl::StrCat("pod ", name, " did not die"));
      }
    }
  }
  it = pods_.find(name);
  if (it != pods_.end()) {
    if (it->second.log_fd >= 0) close(it->second.log_fd);
    pods_.erase(it);
  }
  lock.unlock();
  listeners_.Notify(volume);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Pod>> LocalPodRuntime::List(const std::string& volume) {
  std::lock_guard lock(mu_);
  std::vector<Pod> out;
  for (const auto& [name, local] : pods_) {
    if (local.pod.volume == volume) out.push_back(local.pod);
  }
  return out;
}

void LocalPodRuntime::Watch(Listener listener) { listeners_.Add(std::move(listener)); }

uint16_t LocalPodRuntime::NfsPort(const std::string& volume) const {
  std::lock_guard lock(mu_);
  auto it = nfs_ports_.find(volume);
  return it == nfs_ports_.end() ? 0 : it->second;
}

pid_t LocalPodRuntime::Pid(const std::string& pod) const {
  std::lock_guard lock(mu_);
  auto it = pods_.find(pod);
  return it == pods_.end() || !it->second.process ? -1 : it->second.process->pid();
}

}  // namespace controller
