// A scripted HTTP/1.1 server on loopback standing in for the apiserver where
// a real one cannot be made to misbehave on demand: a watch stream cut in
// the middle of an event, a 410 or a 500 at a chosen request, a watch that
// stays silent. One connection at a time, each answered then closed.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace testing_support {

struct FakeReply {
  int status = 200;
  // The body, each piece written on its own (a chunk of a chunked answer).
  std::vector<std::string> chunks;
  // Closes the connection after the chunks without ending the body.
  bool cut = false;
  // Keeps the answer open after the chunks until the client goes.
  bool hold = false;
};

class FakeApiserver {
 public:
  // `reply` answers each request ("GET /path?query"), on the server's thread.
  using Reply = std::function<FakeReply(const std::string& request)>;
  explicit FakeApiserver(Reply reply);
  ~FakeApiserver();
  FakeApiserver(const FakeApiserver&) = delete;
  FakeApiserver& operator=(const FakeApiserver&) = delete;

  std::string url() const;
  // Every request so far, and when it came.
  std::vector<std::string> requests() const;
  std::vector<std::chrono::steady_clock::time_point> times() const;
  // Connections the client closed while an answer was held.
  int clients_gone() const;

 private:
  void Serve();
  void Answer(int fd);

  const Reply reply_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  int port_ = 0;
  mutable absl::Mutex mu_;
  std::vector<std::string> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::chrono::steady_clock::time_point> times_ ABSL_GUARDED_BY(mu_);
  int clients_gone_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace testing_support
