// A PodRuntime that runs each "pod" as a real `share-manager daemon` process
// on this machine: its own gRPC port and log; per volume one export
// directory, one state directory (NFS recovery records survive the pod, as on
// a persistent volume) and one NFS port (stable, like a Kubernetes Service).
// Exits are seen at once through pidfds and announced to watchers.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "controller/listeners.h"
#include "controller/pod_runtime.h"
#include "supervisor/child_process.h"

namespace controller {

struct LocalPodRuntimeOptions {
  std::string share_manager_binary = "share-manager";
  // Volumes live in <work_dir>/<volume>/{export,state}, pod logs beside them.
  std::string work_dir;
  // Flags for every pod, before the spec's own.
  std::vector<std::string> daemon_flags;
  // SIGTERM, then SIGKILL after this long, as a kubelet would.
  std::chrono::milliseconds termination_grace{3000};
};

class LocalPodRuntime final : public PodRuntime {
 public:
  explicit LocalPodRuntime(LocalPodRuntimeOptions options);
  // Shutdown(), if not done yet.
  ~LocalPodRuntime() override;

  // Deletes every pod (watchers hear of each) and stops the monitor; Create
  // fails from then on. Call it while the watchers are still alive: the
  // deletions notify them.
  void Shutdown();

  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override;
  absl::Status Delete(const std::string& pod) override;
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override;
  void Watch(Listener listener) override;

  // The NFS port clients of the volume use (stable across pods); 0 before any pod.
  uint16_t NfsPort(const std::string& volume) const;
  // The pid of a pod's share-manager, for tests that freeze or kill it.
  pid_t Pid(const std::string& pod) const;

 private:
  struct LocalPod {
    Pod pod;
    std::optional<supervisor::ChildProcess> process;
    int log_fd = -1;
  };
  void Monitor();
  // Runs `spawn` on the monitor thread: a child's PR_SET_PDEATHSIG follows the
  // thread that forked it, and pods must live as long as the runtime, not as
  // long as whichever controller worker created them.
  absl::StatusOr<supervisor::ChildProcess> SpawnOnMonitor(const std::vector<std::string>& argv);
  void OnExit(const std::string& name);

  LocalPodRuntimeOptions options_;
  mutable std::mutex mu_;
  // Signalled (under mu_) when the monitor reaps a pod; Delete waits on it.
  std::condition_variable exit_cv_;
  std::map<std::string, LocalPod> pods_;
  std::map<std::string, uint16_t> nfs_ports_;
  Listeners listeners_;
  base::UniqueFd epoll_;
  base::UniqueFd wakeup_;
  // Set by Shutdown: no new Create starts; `creating_` counts those under way
  // (spawned but not yet in pods_), which Shutdown waits for before deleting.
  bool closing_ = false;
  int creating_ = 0;
  std::condition_variable creates_cv_;
  bool stop_ = false;
  std::vector<std::function<void()>> tasks_;
  std::thread monitor_;
};

}  // namespace controller
