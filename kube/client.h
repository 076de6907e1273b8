// Calls to the Kubernetes API over HTTPS (libcurl): reads, writes with the
// apiserver's optimistic concurrency, and watches streamed one event at a
// time. Thread-safe: every call has its own connection (curl handle), so
// calls from many threads never wait on one another.
//
// Paths are the apiserver's, e.g. /api/v1/namespaces/ns/configmaps
// (kube/paths.h builds them). Errors are mapped as kube/api_error.h says.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kube/cancellation.h"
#include "kube/config.h"
#include "kube/watch_lines.h"
#include "nlohmann/json.hpp"

namespace kube {

struct ClientOptions {
  // The bound of every call but a watch (connecting included).
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds connect_timeout{5000};
  // Asked right before each write (POST, PUT, PATCH, DELETE) goes on the
  // wire, once the connection is up: an error refuses the write unsent and is
  // the call's result (share-controller: unless this replica still leads).
  // Any thread; unset lets every write go.
  std::function<absl::Status()> write_gate;
  // Who the apiserver's audit log and metrics say sent each request.
  std::string user_agent = "share-manager-kube-client";
};

struct ListResult {
  std::vector<nlohmann::json> items;
  std::string resource_version;  // the list's: a watch from it misses nothing
};

// Preconditions and how a delete goes; unset fields are not sent.
struct DeleteOptions {
  std::string uid;               // refused (Aborted) unless the object has this UID
  std::string resource_version;  // refused (Aborted) unless it is still this version
  std::optional<int64_t> grace_period_seconds;
  std::string propagation_policy;  // Orphan, Background or Foreground
};

struct WatchOptions {
  std::string resource_version;  // the events after this one; "" from now on
  bool allow_bookmarks = false;
  // The apiserver ends the watch after this long (an ordinary end, Watch
  // returns OK); the client gives up 30 s later, so a dead apiserver holds a
  // watch no longer than that either.
  std::chrono::seconds timeout{300};
  std::string label_selector;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientConfig config,
                                                        ClientOptions options = {});
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientConfig& config() const { return config_; }

  absl::StatusOr<nlohmann::json> Get(const std::string& path);
  // Every item of the collection (one response: no paging), with the list's
  // resourceVersion. `cancel`: ends the call early (Cancelled) when cancelled.
  absl::StatusOr<ListResult> List(const std::string& path, const std::string& label_selector = "",
                                  Cancellation* cancel = nullptr);
  // POST to the collection: the object as stored. AlreadyExists when it is.
  absl::StatusOr<nlohmann::json> Create(const std::string& path, const nlohmann::json& object);
  // PUT: when `object` carries metadata.resourceVersion, Aborted unless it is
  // still the stored one.
  absl::StatusOr<nlohmann::json> Replace(const std::string& path, const nlohmann::json& object);
  // A JSON merge patch (RFC 7386): the object as stored after it.
  absl::StatusOr<nlohmann::json> MergePatch(const std::string& path, const nlohmann::json& patch);
  // The apiserver's answer: the object (being deleted, with finalizers or a
  // grace period) or a Status. Aborted when a precondition failed.
  absl::StatusOr<nlohmann::json> Delete(const std::string& path, const DeleteOptions& options = {});

  // Streams the collection's changes to `on_event`, on this thread, one event
  // at a time in the apiserver's order, until the apiserver ends the watch
  // (OK), `cancel` is cancelled (Cancelled, at once), the connection fails,
  // or an ERROR event comes: `on_event` gets it, then Watch returns its
  // Status mapped (IsGone when the resourceVersion is too old).
  absl::Status Watch(const std::string& path, const WatchOptions& options,
                     const std::function<void(const WatchEvent&)>& on_event, Cancellation& cancel);

  // Requests sent so far, by method (GET, PUT, POST, PATCH, DELETE; a watch
  // is WATCH), answered or not: the load this client puts on the apiserver.
  std::map<std::string, int64_t> RequestCounts() const;

 private:
  struct Request;
  Client(ClientConfig config, ClientOptions options);
  // Runs one request; its body (a 2xx) as JSON, or the error.
  absl::StatusOr<nlohmann::json> Call(Request& request);
  // A request with a JSON body.
  absl::StatusOr<nlohmann::json> Send(const char* method, const std::string& path,
                                      const nlohmann::json& body, const char* content_type);
  absl::Status Perform(Request& request);
  // libcurl's write callback: the answer's bytes for `request`.
  static size_t OnWrite(char* data, size_t size, size_t count, void* request);
  // libcurl's pre-request callback: the write gate, asked as the request goes out.
  static int OnPrerequest(void* request, char* conn_primary_ip, char* conn_local_ip,
                          int conn_primary_port, int conn_local_port);

  const ClientConfig config_;
  const ClientOptions options_;
  mutable absl::Mutex counts_mu_;
  std::map<std::string, int64_t> counts_ ABSL_GUARDED_BY(counts_mu_);
};

}  // namespace kube
