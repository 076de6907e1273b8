// kubelet's termination message: what `kubectl describe pod` and the pod's
// status show for a container that ended. share-manager's is the last error
// it logged (e.g. "exiting with code 3: ganesha died 6 times within 10m"),
// written to the file kubelet mounts at terminationMessagePath's default
// when it exits non-zero. Without the file (outside Kubernetes) nothing is
// written; with terminationMessagePolicy FallbackToLogsOnError a pod whose
// path was moved still gets the log's tail.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <string>
#include <string_view>

namespace sharemgr {

inline constexpr std::string_view kTerminationLogPath = "/dev/termination-log";

// Remembers the last message logged at error level or above through the
// loggers it is added to (share-manager's own, not ganesha's forwarded lines).
class LastErrorSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string last_error();
  // What was logged last is the reason ("exiting with code N: ..."): no
  // later error (a thread winding down) replaces it.
  void Pin();

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  std::string last_;     // guarded by base_sink's mutex_
  bool pinned_ = false;  // likewise
};

// The process's one sink: main adds it to share-manager's logger, the daemon
// pins the reason it exits with.
const std::shared_ptr<LastErrorSink>& ProcessLastErrorSink();

// Replaces the file's content with `message` (at most kubelet's 4096 bytes),
// only when the file exists. Errors are ignored: the process is exiting, and
// its log already says the same.
void WriteTerminationMessage(std::string_view message, std::string_view path = kTerminationLogPath);

}  // namespace sharemgr
