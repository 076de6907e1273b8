// A PodRuntime that runs each "pod" as a real `share-manager daemon` process
// on this machine: its own gRPC port and log; per volume one export
// directory, one state directory (NFS recovery records survive the pod, as on
// a persistent volume) and stable ports (like a Kubernetes Service).
//
// Pods are observed, not remembered: each pod is recorded under
// <work_dir>/<volume>/pods/<pod>.pod (its share-manager's pid, /proc start
// time and the boot's id) before Create returns, and a runtime started over
// the same work dir adopts the live ones. The record is rewritten as the
// pod's processes come and go, and its delete is in it (fsynced) before
// anything is signalled, so an adopting runtime knows every process the pod
// still has (a filesystem check that outlived its share-manager) and finishes
// a delete under way. Record files are written under no runtime-wide lock:
// one pod's slow disk write holds up no other pod's Create, Delete or List. A pid is
// trusted only with its start time in the same boot, so a reused pid is
// never taken for the pod. A pod is gone only when its whole process tree is
// (the share-manager and the children it started in their own groups,
// ganesha), seen through pidfds and /proc. One runtime per work dir: it holds
// the work dir's lock for its lifetime (shared among highly available
// controller replicas, whose leader election picks the one that acts).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/file_lock.h"
#include "base/files.h"
#include "base/loopback_port.h"
#include "base/proc.h"
#include "base/unique_fd.h"
#include "controller/core/listeners.h"
#include "controller/runtime/pod_runtime.h"
#include "supervisor/child_process.h"

namespace controller {

struct PodRecord;  // what a pod's record file says (local_pod_runtime.cc)

// Below Linux's default ephemeral range (32768-60999).
inline constexpr base::PortRange kDefaultPortRange{20000, 29999};

struct LocalPodRuntimeOptions {
  std::string share_manager_binary = "share-manager";
  // Volumes live in <work_dir>/<volume>/{export,state}, pod logs beside them.
  std::string work_dir;
  // Flags for every pod, before the spec's own.
  std::vector<std::string> daemon_flags;
  // SIGTERM, then SIGKILL to whatever remains after this long. 0: per pod,
  // twice the --stop-timeout its daemon runs with (the last in its argv: the
  // share's daemon_flags, then these, else the daemon's default 10 s) plus
  // 5 s, so a share-manager always gets to stop its ganesha itself first.
  std::chrono::milliseconds termination_grace{0};
  // Pods get SIGKILL when the runtime's process dies (PR_SET_PDEATHSIG). For
  // tests; otherwise pods outlive a controller crash and are adopted.
  bool ephemeral = false;
  // Shutdown() deletes every pod and waits until they are gone. When false,
  // pods keep running (ephemeral ones excepted) for the next runtime to adopt.
  bool stop_pods_on_exit = true;
  // Volumes' gRPC and NFS ports are drawn at random from here (see
  // LocalPortTable).
  base::PortRange port_range = kDefaultPortRange;
  // Who holds the work dir, as the error of a second runtime over it names it.
  std::string lock_holder = "pod runtime";
  // Highly available share-controller replicas share one work dir: each
  // holds its lock shared (so no single-machine controller, which locks it
  // exclusively, runs beside them) and the leader election, not the lock,
  // decides which one acts (docs/DESIGN-NOTES.md "Highly available share-controller").
  bool share_work_dir = false;
  // Writes a pod record whole (readers see the old file or the new one).
  // Unset: base::WriteFileAtomically. Only tests set it, to make one pod's
  // record writes slow or fail, or to see what is written when; it is called
  // from the runtime's threads and from Create's and Delete's callers.
  std::function<absl::Status(const std::string& path, const std::string& text,
                             base::Durability durability)>
      write_record;
};

// Per-volume ports persisted in <work_dir>/.ports (flocked while read and
// written): a volume keeps its NFS and gRPC ports across pods and controller
// restarts, and no port is ever handed to two volumes or to both roles.
//
// New ports come from `range`, below the kernel's ephemeral range: a port
// there (what a bind to port 0 gets) is also what outgoing connections take,
// so one could hold a volume's port while its pod is down. Drawn at random,
// not in order, so work dirs side by side (parallel tests) rarely collide.
class LocalPortTable {
 public:
  struct Ports {
    uint16_t grpc = 0;
    uint16_t nfs = 0;
  };
  explicit LocalPortTable(std::string work_dir, base::PortRange range = kDefaultPortRange)
      : work_dir_(std::move(work_dir)), range_(range) {}
  // The part of `range` below the kernel's ephemeral range (all of it when
  // that range cannot be read); InvalidArgument when nothing is left or it
  // is no range.
  static absl::StatusOr<base::PortRange> Usable(base::PortRange range);
  // The volume's ports, allocated (free on 127.0.0.1 now, unused by any other
  // volume) and persisted the first time.
  absl::StatusOr<Ports> Get(const std::string& volume);
  // Every volume's ports as persisted.
  absl::StatusOr<std::map<std::string, Ports>> Load() const;

 private:
  std::string work_dir_;
  base::PortRange range_;
};

class LocalPodRuntime final : public PodRuntime {
 public:
  // Creates the work dir when missing and locks it for the runtime's
  // lifetime, then adopts the pods recorded there. Two runtimes over one work
  // dir would both adopt, delete and replace the same pods: while another one
  // (in this process or another) holds it, fails with FailedPrecondition
  // "another <lock_holder> holds <work_dir> (pid N)" (with share_work_dir:
  // only while one holds it exclusively). InvalidArgument: no work dir, or no
  // usable port range (LocalPortTable::Usable).
  static absl::StatusOr<std::unique_ptr<LocalPodRuntime>> Open(LocalPodRuntimeOptions options);
  // Shutdown(), if not done yet; then releases the work dir.
  ~LocalPodRuntime() override;
  LocalPodRuntime(const LocalPodRuntime&) = delete;
  LocalPodRuntime& operator=(const LocalPodRuntime&) = delete;

  // With stop_pods_on_exit (or ephemeral): deletes every pod and waits until
  // their processes are gone (watchers hear of each). Then stops the monitor;
  // Create fails from then on. Call it while the watchers are still alive.
  void Shutdown();
  // Shutdown() that leaves every pod running (ephemeral ones still die with
  // this process), for a controller that could not start: the pods it adopted
  // were serving before it came and must not pay for its failure.
  void ShutdownLeavingPods();

  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override;
  // FailedPrecondition once Shutdown began (which deletes what is to be
  // deleted itself, after the Deletes under way).
  absl::Status Delete(const std::string& pod) override;
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override;
  void Watch(Listener listener) override;

  // The NFS port clients of the volume use (stable across pods and restarts);
  // 0 before any pod.
  uint16_t NfsPort(const std::string& volume) const;
  // The pid of a pod's share-manager, for tests that freeze or kill it.
  pid_t Pid(const std::string& pod) const;
  // A pod's SIGTERM to SIGKILL delay (see termination_grace); 0 for an
  // unknown pod.
  std::chrono::milliseconds TerminationGrace(const std::string& pod) const;

 private:
  // Orders the record writes and removals of one pod name (its pods, one
  // after another), so the latest state always lands last: each is
  // versioned when snapshotted under mu_, and applied under `mu` alone (held
  // by nothing but this name's writers, never with mu_); one older than what
  // landed is dropped. So a stale write never lands after a newer one or the
  // pod's removal, and a removal never after a new Create of the name.
  struct RecordSlot {
    absl::Mutex mu;
    uint64_t landed ABSL_GUARDED_BY(mu) = 0;           // the newest version written or removed
    std::string landed_path ABSL_GUARDED_BY(mu);       // what it wrote; empty after a removal
    bool landed_deleting ABSL_GUARDED_BY(mu) = false;  // what it wrote said state=deleting
    // Failed writes since the last that landed, and when one was last logged.
    int failures ABSL_GUARDED_BY(mu) = 0;
    std::chrono::steady_clock::time_point failure_logged ABSL_GUARDED_BY(mu);
  };
  struct Proc {
    pid_t pid = 0;
    uint64_t start_ticks = 0;
    base::UniqueFd pidfd;    // readable once it exited
    bool sigkilled = false;  // had the delete's SIGKILL (or was spared it, a check)
  };
  struct LocalPod {
    Pod pod;
    pid_t pid = 0;  // the share-manager
    uint64_t start_ticks = 0;
    std::string record_path;
    std::string state_dir;
    std::chrono::milliseconds stop_timeout{0};  // its daemon's, kept in its record
    std::chrono::milliseconds grace{0};         // SIGTERM to SIGKILL
    // Set when this runtime spawned it (reaped here, exit code known).
    std::optional<supervisor::ChildProcess> child;
    bool share_manager_alive = false;
    // Every live process of the pod's tree, the share-manager included.
    std::vector<Proc> procs;
    bool deleting = false;
    std::chrono::steady_clock::time_point term_started;
    bool orphans_termed = false;
    bool killed = false;
    // Its record no longer says what procs and deleting do.
    bool record_stale = false;
    // Other records that named this pod (see Load): removed once its own
    // record lists their processes too, or when the pod is gone.
    std::vector<std::string> superseded_records;
    // Its name's record writes, in order (see RecordSlot).
    std::shared_ptr<RecordSlot> slot;
    // This pod among all pods of its name, past and to come.
    uint64_t instance = 0;
    // A write of its record waits for the writer thread: no second one is
    // queued meanwhile (record_stale stays set until then).
    bool record_queued = false;
    // Delete is writing "deleting" into its record: nothing is signalled
    // before that write lands, and a second Delete waits for it.
    bool delete_recording = false;
  };
  // A record to write, or the records to remove, as snapshotted under mu_;
  // applied outside it (Apply).
  struct RecordWrite {
    std::string name;
    uint64_t instance = 0;
    std::shared_ptr<RecordSlot> slot;
    uint64_t version = 0;
    std::string path;
    std::optional<std::string> text;  // nullopt: a removal of `unlinks`
    base::Durability durability = base::Durability::kReplaced;
    bool deleting = false;  // the record says state=deleting
    // After the write: the records it replaces (they name no process it
    // does not). For a removal: every record of the pod.
    std::vector<std::string> unlinks;
    bool queued = false;  // by the monitor, for the writer thread
  };
  LocalPodRuntime(LocalPodRuntimeOptions options, base::FileLock work_dir_lock);
  // Deletes every pod first when `delete_pods`.
  void Stop(bool delete_pods);
  void Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pod `record` (at `path`, in `volume_dir`) describes, its live
  // processes tracked.
  LocalPod Adopt(const PodRecord& record, std::string path, const std::string& volume_dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Two records name `kept`'s pod: keeps one (live processes first, then the
  // newer epoch) with both process sets, so none escapes a Delete.
  void Merge(LocalPod& kept, LocalPod other) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What `local`'s record says: its pod, processes and delete.
  std::string RecordText(const LocalPod& local) const;
  // The record slot of pod `name`: the one its earlier pods used while any
  // of their writes is pending, else a new one.
  std::shared_ptr<RecordSlot> SlotFor(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `local`'s record as it is now, to write; marked fresh.
  RecordWrite Snapshot(LocalPod& local) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stale records not queued yet, marked queued (for the writer thread).
  std::vector<RecordWrite> TakeStaleRecords() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes or removes under the pod's slot lock alone (no runtime-wide lock
  // across file I/O); a write older than what landed is dropped. A failed
  // write is logged, at most every 30 s per pod name, and its recovery once.
  absl::Status Apply(const RecordWrite& write) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells the pod how its Apply went: stale again when it failed; its
  // superseded records gone when it landed. A record saying "deleting" that
  // landed (a monitor's write snapshotted while Delete recorded it) begins
  // the delete, whatever became of Delete's own write: the record is what an
  // adopting runtime would go by.
  void Settle(const RecordWrite& write, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies what the monitor queued, in order, off the monitor.
  void RecordWriter();
  // Delete's work, for Delete and Stop (which deletes once closing).
  absl::Status DeletePod(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Marks the pod deleting and SIGTERMs its share-manager. Its record says
  // so already.
  void BeginDelete(LocalPod& local) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SIGCONT and SIGTERM to the share-manager and its group.
  void SignalShareManager(LocalPod& local) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a gone pod; returns the removal of its records, to apply.
  RecordWrite Forget(std::map<std::string, LocalPod>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes one record file through options_.write_record when set.
  absl::Status WriteRecordFile(const std::string& path, const std::string& text,
                               base::Durability durability) const;
  // The termination grace of a pod whose daemon runs with `stop_timeout`.
  std::chrono::milliseconds Grace(std::chrono::milliseconds stop_timeout) const;
  void Monitor();
  // Refreshes one pod from /proc and its pidfds; true when its listing changed.
  bool Refresh(LocalPod& local) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `pid` (whose stat is `st`), named by the volume's ganesha.pid, is
  // `local`'s ganesha left behind by its dead share-manager: a ganesha started
  // after it, tracked by no other pod, and orphaned (its parent init or one
  // of the share-manager's possible subreapers).
  bool OrphanedGaneshaOf(const LocalPod& local, pid_t pid, const base::ProcStat& st) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddProc(LocalPod& local, pid_t pid, uint64_t start_ticks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Signals every live process of the pod, and the group of each that leads
  // one. SIGKILL spares filesystem checks (they had SIGTERM) and returns them;
  // a check found only in a group is tracked from then on.
  std::vector<pid_t> SignalAll(LocalPod& local, int sig) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reaps on the reaper thread a share-manager whose exit status was read.
  void ReapLater(supervisor::ChildProcess child);
  void Reaper();
  // `stdin_fd`: the pod's stdin (the gate that holds it until it is recorded).
  absl::StatusOr<supervisor::ChildProcess> SpawnOnMonitor(const std::vector<std::string>& argv,
                                                          int stdin_fd);
  void Wake();

  // First: released only after everything below (the monitor included) is gone.
  base::FileLock work_dir_lock_;
  LocalPodRuntimeOptions options_;
  const std::string boot_id_;  // this boot's; empty when unreadable
  LocalPortTable ports_;
  // Waiters (Shutdown) await conditions on it: a pod left pods_, creating_ fell.
  mutable absl::Mutex mu_;
  std::map<std::string, LocalPod> pods_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint16_t> nfs_ports_ ABSL_GUARDED_BY(mu_);
  // Volumes with a pod record that cannot be read: List fails for them rather
  // than report "no pods" (which would start a second server).
  std::map<std::string, std::string> bad_records_ ABSL_GUARDED_BY(mu_);
  // The work dir itself could not be listed at start: every List fails.
  std::string load_error_ ABSL_GUARDED_BY(mu_);
  Listeners listeners_;
  // Registered pidfds come and go under mu_; epoll_wait needs no lock.
  base::UniqueFd epoll_;
  base::UniqueFd wakeup_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  int creating_ ABSL_GUARDED_BY(mu_) = 0;
  // Delete calls under way: Stop waits for them (they write records and
  // signal), and no new one starts once closing_.
  int deleting_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> creating_names_ ABSL_GUARDED_BY(mu_);  // Creates under way
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::thread monitor_;
  // Record slots by pod name, while any pod or pending write holds one.
  std::map<std::string, std::weak_ptr<RecordSlot>> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t record_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_instance_ ABSL_GUARDED_BY(mu_) = 0;
  // The monitor's record writes and removals, for the writer thread: a slow
  // disk holds up neither the monitor nor any caller.
  std::vector<RecordWrite> record_jobs_ ABSL_GUARDED_BY(mu_);
  bool writer_stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
  // Exited share-managers, their status read, not reaped yet. Reaping one can
  // block for a long time (see ChildProcess::ExitStatus): never under mu_,
  // which List waits for, nor on the monitor, which spawns the replacement.
  absl::Mutex reap_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<supervisor::ChildProcess> unreaped_ ABSL_GUARDED_BY(reap_mu_);
  bool reaper_stop_ ABSL_GUARDED_BY(reap_mu_) = false;
  std::thread reaper_;
};

}  // namespace controller
