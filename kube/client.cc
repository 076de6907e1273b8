#include "kube/client.h"

#include <curl/curl.h>

#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/files.h"
#include "kube/api_error.h"
#include "kube/paths.h"

namespace kube {
namespace {

// The most an answer (or one watch event) may hold. The apiserver's own
// limit on an object is about 3 MiB (etcd's); a list of a namespace's pods
// stays far below this.
constexpr size_t kMaxResponseBytes = size_t{256} << 20;

// The client ends a watch this long after the apiserver should have.
constexpr std::chrono::seconds kWatchGrace{30};

struct EasyCleanup {
  void operator()(CURL* easy) const { curl_easy_cleanup(easy); }
};
struct MultiCleanup {
  void operator()(CURLM* multi) const { curl_multi_cleanup(multi); }
};
struct HeadersCleanup {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

std::string WithQuery(std::string path, const char* key, const std::string& value) {
  absl::StrAppend(&path, absl::StrContains(path, '?') ? "&" : "?", key, "=", UrlEscape(value));
  return path;
}

bool IsTlsError(CURLcode code) {
  switch (code) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_ENGINE_INITFAILED:
      return true;
    default:
      return false;
  }
}

absl::Status TransportError(const std::string& what, CURLcode code, const char* detail,
                            std::chrono::milliseconds timeout) {
  const std::string said = *detail != '\0' ? detail : curl_easy_strerror(code);
  if (code == CURLE_OPERATION_TIMEDOUT) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, ": no complete answer within ", base::FormatDuration(timeout), " (", said, ")"));
  }
  if (IsTlsError(code)) {
    return absl::UnavailableError(absl::StrCat(
        what,
        ": TLS with the apiserver failed (its certificate against the configured CA, or "
        "our client certificate): ",
        said));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", said));
}

}  // namespace

struct Client::Request {
  std::string method;
  std::string path;  // with its query
  std::string body;
  std::string content_type;
  std::chrono::milliseconds timeout;
  Cancellation* cancel = nullptr;
  // A stream's bytes of a 2xx answer go here as they come instead of into
  // `response`; an error it returns ends the transfer and is the result.
  std::function<absl::Status(absl::string_view)> on_bytes;
  // Asked as a write goes out (ClientOptions::write_gate); its refusal.
  const std::function<absl::Status()>* gate = nullptr;
  absl::Status gate_status;

  CURL* easy = nullptr;
  long http_status = 0;
  std::string response;
  absl::Status stream_status;

  std::string what() const { return absl::StrCat(method, " ", path); }
};

size_t Client::OnWrite(char* data, size_t size, size_t count, void* user) {
  auto& request = *static_cast<Client::Request*>(user);
  const size_t length = size * count;
  if (request.on_bytes) {
    long code = 0;
    curl_easy_getinfo(request.easy, CURLINFO_RESPONSE_CODE, &code);
    if (code / 100 == 2) {
      request.stream_status = request.on_bytes(absl::string_view(data, length));
      return request.stream_status.ok() ? length : 0;  // 0: curl ends the transfer
    }
  }
  // An answer no apiserver gives (a misrouted or hostile server): bounded,
  // so it cannot take the controller's memory.
  if (request.response.size() + length > kMaxResponseBytes) {
    request.stream_status = absl::UnavailableError(
        absl::StrCat(request.what(), ": the answer exceeds ", kMaxResponseBytes, " bytes"));
    return 0;
  }
  request.response.append(data, length);
  return length;
}

int Client::OnPrerequest(void* user, char*, char*, int, int) {
  auto& request = *static_cast<Client::Request*>(user);
  request.gate_status = (*request.gate)();
  return request.gate_status.ok() ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientConfig config, ClientOptions options) {
  if (!absl::StartsWith(config.server, "https://") && !absl::StartsWith(config.server, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("apiserver URL \"", config.server, "\" is not http(s)://HOST[:PORT]"));
  }
  if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and a key its certificate");
  }
  // Not thread-safe in the libcurl versions Debian ships, and needed once
  // before any handle.
  static std::once_flag curl_initialized;
  std::call_once(curl_initialized, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::unique_ptr<Client>(new Client(std::move(config), options));
}

Client::Client(ClientConfig config, ClientOptions options)
    : config_(std::move(config)), options_(options) {}

std::map<std::string, int64_t> Client::RequestCounts() const {
  absl::MutexLock lock(&counts_mu_);
  return counts_;
}

absl::Status Client::Perform(Request& request) {
  {
    const bool watch = request.method == "GET" && absl::StrContains(request.path, "watch=1");
    absl::MutexLock lock(&counts_mu_);
    ++counts_[watch ? "WATCH" : request.method];
  }
  std::unique_ptr<CURL, EasyCleanup> easy(curl_easy_init());
  std::unique_ptr<CURLM, MultiCleanup> multi(curl_multi_init());
  if (easy == nullptr || multi == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(request.what(), ": no curl handle"));
  }
  request.easy = easy.get();

  curl_slist* raw_headers = curl_slist_append(nullptr, "Accept: application/json");
  std::unique_ptr<curl_slist, HeadersCleanup> headers(raw_headers);
  if (!request.content_type.empty()) {
    headers.reset(curl_slist_append(headers.release(),
                                    absl::StrCat("Content-Type: ", request.content_type).c_str()));
  }
  std::string token = config_.token;
  if (!config_.token_file.empty()) {
    // Read for every request: a projected service-account token is rotated
    // in place, and the old one stops working.
    auto content = base::ReadFile(config_.token_file);
    if (!content.ok()) {
      return absl::UnauthenticatedError(absl::StrCat(
          request.what(), ": cannot read the token file: ", content.status().message()));
    }
    token = std::string(absl::StripAsciiWhitespace(*content));
  }
  if (!token.empty()) {
    headers.reset(curl_slist_append(headers.release(),
                                    absl::StrCat("Authorization: Bearer ", token).c_str()));
  }

  CURL* h = easy.get();
  char error[CURL_ERROR_SIZE] = "";
  const std::string url = config_.server + request.path;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  // Threads: no signals for DNS timeouts.
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  // The apiserver is reached directly: a proxy from the environment
  // (HTTPS_PROXY in a pod's spec, meant for the workload) would see the
  // token, and a redirect would send it elsewhere.
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (!request.body.empty()) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  // A peer gone without a FIN (its machine lost) is noticed within about a
  // minute, not at the request's end.
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &request);
  // Asked after connecting and TLS, right before the request is sent: the
  // time between the answer and the apiserver acting on the write is as
  // short as it can be made.
  if (request.method != "GET" && options_.write_gate) {
    request.gate = &options_.write_gate;
    // A libcurl older than 7.80 has no such callback: the write is refused,
    // never sent ungated.
    if (curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, OnPrerequest) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_PREREQDATA, &request) != CURLE_OK) {
      return absl::FailedPreconditionError(absl::StrCat(
          request.what(), ": not sent: this libcurl cannot ask the write gate (7.80 or newer)"));
    }
  }
  // The blobs are copied by curl (CURL_BLOB_COPY).
  curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
  if (!config_.ca_pem.empty()) curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  curl_blob cert{const_cast<char*>(config_.client_cert_pem.data()), config_.client_cert_pem.size(),
                 CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(),
                CURL_BLOB_COPY};
  if (!config_.client_cert_pem.empty()) {
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
  }

  // Through a multi handle, even for one transfer: curl_multi_wakeup lets a
  // cancellation end a request blocked on a quiet socket at once.
  CURLM* m = multi.get();
  Cancellation::Registration registration;
  if (request.cancel != nullptr &&
      !request.cancel->Register([m] { curl_multi_wakeup(m); }, registration)) {
    return absl::CancelledError(absl::StrCat(request.what(), ": cancelled"));
  }
  curl_multi_add_handle(m, h);
  bool cancelled = false;
  CURLMcode multi_code = CURLM_OK;
  for (int running = 1;;) {
    multi_code = curl_multi_perform(m, &running);
    if (multi_code != CURLM_OK || running == 0) break;
    if (request.cancel != nullptr && request.cancel->cancelled()) {
      cancelled = true;
      break;
    }
    multi_code = curl_multi_poll(m, nullptr, 0, 1000, nullptr);
    if (multi_code != CURLM_OK) break;
  }
  CURLcode result = CURLE_OK;
  int queued = 0;
  while (CURLMsg* message = curl_multi_info_read(m, &queued)) {
    if (message->msg == CURLMSG_DONE) result = message->data.result;
  }
  if (request.cancel != nullptr) request.cancel->Unregister(registration);
  curl_multi_remove_handle(m, h);

  if (cancelled) return absl::CancelledError(absl::StrCat(request.what(), ": cancelled"));
  if (multi_code != CURLM_OK) {
    return absl::InternalError(
        absl::StrCat(request.what(), ": curl: ", curl_multi_strerror(multi_code)));
  }
  if (result == CURLE_WRITE_ERROR && !request.stream_status.ok()) return request.stream_status;
  if (result == CURLE_ABORTED_BY_CALLBACK && !request.gate_status.ok()) {
    return absl::Status(
        request.gate_status.code(),
        absl::StrCat(request.what(), ": not sent: ", request.gate_status.message()));
  }
  if (result != CURLE_OK) return TransportError(request.what(), result, error, request.timeout);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &request.http_status);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> Client::Call(Request& request) {
  if (absl::Status done = Perform(request); !done.ok()) return done;
  if (request.http_status / 100 != 2) {
    return ApiError(request.what(), request.http_status, request.response);
  }
  auto body = nlohmann::json::parse(request.response, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return absl::UnavailableError(absl::StrCat(request.what(), ": HTTP ", request.http_status,
                                               " with a body that is not JSON"));
  }
  return body;
}

absl::StatusOr<nlohmann::json> Client::Get(const std::string& path) {
  Request request{.method = "GET", .path = path, .timeout = options_.request_timeout};
  return Call(request);
}

absl::StatusOr<ListResult> Client::List(const std::string& path, const std::string& label_selector,
                                        Cancellation* cancel) {
  Request request{
      .method = "GET",
      .path = label_selector.empty() ? path : WithQuery(path, "labelSelector", label_selector),
      .timeout = options_.request_timeout,
      .cancel = cancel};
  auto list = Call(request);
  if (!list.ok()) return list.status();
  // Anything but a list with its version is no answer: taken as an empty
  // list, it would report every object deleted, and a watch from no version
  // would miss what changed meanwhile.
  ListResult result;
  const auto kind = list->find("kind");
  if (kind == list->end() || !kind->is_string() ||
      !absl::EndsWith(kind->get<std::string>(), "List")) {
    return absl::UnavailableError(absl::StrCat(request.what(), ": the answer is no list"));
  }
  const auto metadata = list->find("metadata");
  if (metadata != list->end() && metadata->is_object()) {
    const auto version = metadata->find("resourceVersion");
    if (version != metadata->end() && version->is_string()) {
      result.resource_version = version->get<std::string>();
    }
  }
  if (result.resource_version.empty()) {
    return absl::UnavailableError(
        absl::StrCat(request.what(), ": the list has no resourceVersion"));
  }
  const auto items = list->find("items");
  if (items != list->end() && items->is_array()) {
    result.items.reserve(items->size());
    for (auto& item : *items) result.items.push_back(std::move(item));
  } else if (items != list->end() && !items->is_null()) {
    return absl::UnavailableError(absl::StrCat(request.what(), ": items is not a list"));
  }
  return result;
}

absl::StatusOr<nlohmann::json> Client::Send(const char* method, const std::string& path,
                                            const nlohmann::json& body, const char* content_type) {
  Request request{.method = method,
                  .path = path,
                  // Text that is not UTF-8 (an error message quoting a
                  // path) is sent with U+FFFD in its place, never thrown on.
                  .body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  .content_type = content_type,
                  .timeout = options_.request_timeout};
  return Call(request);
}

absl::StatusOr<nlohmann::json> Client::Create(const std::string& path,
                                              const nlohmann::json& object) {
  return Send("POST", path, object, "application/json");
}

absl::StatusOr<nlohmann::json> Client::Replace(const std::string& path,
                                               const nlohmann::json& object) {
  return Send("PUT", path, object, "application/json");
}

absl::StatusOr<nlohmann::json> Client::MergePatch(const std::string& path,
                                                  const nlohmann::json& patch) {
  return Send("PATCH", path, patch, "application/merge-patch+json");
}

absl::StatusOr<nlohmann::json> Client::Delete(const std::string& path,
                                              const DeleteOptions& options) {
  nlohmann::json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!options.uid.empty()) body["preconditions"]["uid"] = options.uid;
  if (!options.resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = options.resource_version;
  }
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
  return Send("DELETE", path, body, "application/json");
}

absl::Status Client::Watch(const std::string& path, const WatchOptions& options,
                           const std::function<void(const WatchEvent&)>& on_event,
                           Cancellation& cancel) {
  std::string query = WithQuery(path, "watch", "1");
  if (!options.resource_version.empty()) {
    query = WithQuery(std::move(query), "resourceVersion", options.resource_version);
  }
  if (options.allow_bookmarks) query = WithQuery(std::move(query), "allowWatchBookmarks", "true");
  query = WithQuery(std::move(query), "timeoutSeconds", std::to_string(options.timeout.count()));
  if (!options.label_selector.empty()) {
    query = WithQuery(std::move(query), "labelSelector", options.label_selector);
  }
  Request request{.method = "GET",
                  .path = std::move(query),
                  .timeout = options.timeout + kWatchGrace,
                  .cancel = &cancel};
  const std::string what = request.what();
  LineSplitter lines;
  request.on_bytes = [&](absl::string_view bytes) -> absl::Status {
    if (lines.pending() + bytes.size() > kMaxResponseBytes) {
      return absl::UnavailableError(
          absl::StrCat(what, ": a watch event longer than ", kMaxResponseBytes, " bytes"));
    }
    for (const std::string& line : lines.Feed(bytes)) {
      auto event = ParseWatchEvent(line);
      if (!event.ok()) {
        return absl::UnavailableError(absl::StrCat(what, ": ", event.status().message()));
      }
      on_event(*event);
      // The apiserver ends the watch after an ERROR; so does this client.
      if (event->type == "ERROR") return StatusFromObject(what, event->object);
    }
    return absl::OkStatus();
  };
  if (absl::Status done = Perform(request); !done.ok()) return done;
  if (request.http_status / 100 != 2) {
    return ApiError(what, request.http_status, request.response);
  }
  if (lines.pending() != 0) {
    return absl::UnavailableError(absl::StrCat(
        what, ": the stream ended in the middle of an event (", lines.pending(), " bytes of it)"));
  }
  return absl::OkStatus();
}

}  // namespace kube
