#include "controller/ha/kubernetes/lease_election.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "etcd/lease_validity.h"
#include "kube/paths.h"

namespace controller::kubernetes {
namespace {

using base::Duration;
using base::TimePoint;
using Campaign = ElectionBackend::Campaign;
using nlohmann::json;

// The longest wait a Lease's own duration can ask of a follower.
constexpr Duration kMaxWait = etcd::kMaxLeaseTtl;
// The shortest after a release (client-go releases with a duration of 1 s).
constexpr Duration kMinReleasedWait{1000};

// A MicroTime as the apiserver writes it. For people reading the Lease, and
// as the mark of one term: no decision compares it with a clock.
std::string MicroTimeNow() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone());
}

// Fields read defensively: a Lease is anybody's with update rights on it.
std::string StringAt(const json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}
int64_t IntAt(const json& object, const char* key) {
  if (!object.is_object()) return 0;
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}
std::string VersionOf(const json& object) {
  const auto metadata = object.is_object() ? object.find("metadata") : object.end();
  return metadata != object.end() ? StringAt(*metadata, "resourceVersion") : "";
}
// The spec of a Lease about to be written, made an object if it was not.
json& WritableSpec(json& lease) {
  json& spec = lease["spec"];
  if (!spec.is_object()) spec = json::object();
  return spec;
}
const json& SpecOf(const json& lease) {
  static const json kNone = json::object();
  const auto it = lease.find("spec");
  return it != lease.end() && it->is_object() ? *it : kNone;
}

// What one read of the Lease says.
struct LeaseView {
  bool exists = false;
  std::string version;
  std::string holder;
  std::string acquire_time;
  int64_t duration_seconds = 0;
  int64_t transitions = 0;
};
LeaseView ViewOf(const std::optional<json>& lease) {
  if (!lease) return {};
  const json& spec = SpecOf(*lease);
  return {.exists = true,
          .version = VersionOf(*lease),
          .holder = StringAt(spec, "holderIdentity"),
          .acquire_time = StringAt(spec, "acquireTime"),
          .duration_seconds = IntAt(spec, "leaseDurationSeconds"),
          .transitions = IntAt(spec, "leaseTransitions")};
}

// leaseTransitions is an int32 in the API: a hostile maximum must not make
// every take an invalid write.
int64_t NextTransition(int64_t transitions) {
  return transitions >= std::numeric_limits<int32_t>::max() || transitions < 0 ? 0
                                                                               : transitions + 1;
}

// What a write answered, checked before the next write builds on it: an
// answer without a resourceVersion would make the next PUT unconditional.
absl::StatusOr<json> Written(absl::StatusOr<json> answer, const std::string& what) {
  if (!answer.ok()) return answer;
  if (VersionOf(*answer).empty()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the answer is not a Lease with a resourceVersion"));
  }
  return answer;
}

Duration Clamp(int64_t seconds, Duration low, Duration high) {
  // Seconds beyond kMaxWait's are clamped before converting: no overflow.
  const int64_t capped = std::clamp<int64_t>(seconds, 0, kMaxWait.count() / 1000);
  return std::clamp<Duration>(Duration(capped * 1000), low, high);
}

// The keeper's deadlines are etcd's slices (TTL/6), too short for a request
// that connects and shakes hands anew on a loaded node: each request here is
// bounded by the client's timeout instead, and only WaitVacant's deadline
// (when to read again) is kept. Ignoring them is safe: the keeper counts a
// validity from the step's start and judges an answer that came after it
// lost (etcd::LeaseValidity).
class LeaseElectionBackend final : public ElectionBackend {
 public:
  LeaseElectionBackend(std::unique_ptr<kube::Client> client, LeaseElectionOptions options,
                       const base::TimeSource& clock, SleepUntil sleep_until)
      : client_(std::move(client)),
        options_(std::move(options)),
        clock_(clock),
        sleep_until_(std::move(sleep_until)),
        collection_(kube::ResourcePath({.group = "coordination.k8s.io",
                                        .version = "v1",
                                        .namespace_name = options_.namespace_name,
                                        .plural = "leases"})),
        path_(absl::StrCat(collection_, "/", options_.lease_name)) {}

  absl::StatusOr<Campaign> TryLead(int64_t ttl_seconds, TimePoint deadline) override;
  absl::StatusOr<bool> WaitVacant(TimePoint deadline) override;
  absl::StatusOr<etcd::LeaseRenewal> KeepAlive(TimePoint deadline) override;
  absl::Status Resign(TimePoint deadline) override;

 private:
  // Observed version and since when, on the keeper's clock.
  struct Seen {
    bool exists = false;
    std::string version;
    TimePoint since{};
    Duration wait{};
    std::string holder;
  };

  // The Lease, or nullopt when there is none.
  absl::StatusOr<std::optional<json>> Read();
  // Notes what a read at `at` found; the wait restarts when the version changed.
  void Observe(const LeaseView& view, TimePoint at);
  bool VacantAt(TimePoint at) const { return seen_ && at >= seen_->since + seen_->wait; }
  // Whom a follower follows, as the log names it.
  std::string Leader() const;
  // The term we took and still hold, by id and acquireTime.
  bool Ours(const LeaseView& view) const {
    return view.exists && view.holder == options_.id && !acquired_at_.empty() &&
           view.acquire_time == acquired_at_;
  }
  // `base` with our holder, duration and acquireTime (all rewritten, so a
  // hand-edited duration does not last) and renewTime now, PUT on its version.
  absl::Status Renew(json base);

  const std::unique_ptr<kube::Client> client_;
  const LeaseElectionOptions options_;
  const base::TimeSource& clock_;
  const SleepUntil sleep_until_;
  const std::string collection_, path_;
  // Keeper thread only.
  std::optional<Seen> seen_;
  Duration last_held_wait_{};  // the wait of the last held Lease seen
  int64_t ttl_seconds_ = 0;    // as campaigned with
  std::string acquired_at_;    // of the term we took; "" before
  json held_;                  // the Lease as we last wrote it
};

absl::StatusOr<std::optional<json>> LeaseElectionBackend::Read() {
  auto lease = client_->Get(path_);
  if (absl::IsNotFound(lease.status())) return std::optional<json>();
  if (!lease.ok()) return lease.status();
  if (!lease->is_object()) {
    return absl::UnavailableError(absl::StrCat("GET ", path_, ": the answer is not a Lease"));
  }
  return std::optional<json>(*std::move(lease));
}

void LeaseElectionBackend::Observe(const LeaseView& view, TimePoint at) {
  if (seen_ && seen_->exists == view.exists && seen_->version == view.version) return;
  Duration wait;
  if (!view.exists) {
    wait = std::max(options_.ttl, last_held_wait_);
  } else if (view.holder.empty()) {
    wait = Clamp(view.duration_seconds, kMinReleasedWait, kMaxWait);
  } else {
    wait = Clamp(view.duration_seconds, options_.ttl, kMaxWait);
    last_held_wait_ = wait;
  }
  seen_ = Seen{.exists = view.exists,
               .version = view.version,
               .since = at,
               .wait = wait,
               .holder = view.holder};
}

std::string LeaseElectionBackend::Leader() const {
  if (!seen_ || !seen_->exists)
    return absl::StrCat("nobody yet (no Lease ", options_.lease_name, ")");
  if (seen_->holder.empty()) return "nobody (the Lease was released)";
  return seen_->holder;
}

absl::StatusOr<Campaign> LeaseElectionBackend::TryLead(int64_t ttl_seconds, TimePoint) {
  ttl_seconds_ = ttl_seconds;
  auto read = Read();
  if (!read.ok()) return read.status();
  const LeaseView view = ViewOf(*read);
  Observe(view, clock_.Now());
  if (!VacantAt(clock_.Now())) return Campaign{.won = false, .leader = Leader()};

  json lease =
      *read ? **read
            : json{{"apiVersion", "coordination.k8s.io/v1"},
                   {"kind", "Lease"},
                   {"metadata",
                    {{"name", options_.lease_name}, {"namespace", options_.namespace_name}}}};
  const std::string acquired = MicroTimeNow();
  const int64_t transitions = !view.exists                 ? 0
                              : view.holder == options_.id ? view.transitions
                                                           : NextTransition(view.transitions);
  lease["spec"] = {{"holderIdentity", options_.id},
                   {"leaseDurationSeconds", ttl_seconds},
                   {"acquireTime", acquired},
                   {"renewTime", acquired},
                   {"leaseTransitions", transitions}};
  // A PUT on the version observed: whoever else took it meanwhile wins.
  auto taken =
      Written(view.exists ? client_->Replace(path_, lease) : client_->Create(collection_, lease),
              absl::StrCat("taking Lease ", path_));
  if (absl::IsAborted(taken.status()) || absl::IsAlreadyExists(taken.status())) {
    return Campaign{.won = false, .leader = "another replica (it took the Lease first)"};
  }
  if (!taken.ok()) return taken.status();
  held_ = *std::move(taken);
  acquired_at_ = acquired;
  return Campaign{.won = true, .token = transitions, .granted_ttl_seconds = ttl_seconds};
}

absl::StatusOr<bool> LeaseElectionBackend::WaitVacant(TimePoint deadline) {
  auto read = Read();
  if (!read.ok()) return read.status();
  const TimePoint at = clock_.Now();
  Observe(ViewOf(*read), at);
  if (VacantAt(at)) return true;
  sleep_until_(std::min(deadline, seen_->since + seen_->wait));
  return false;
}

absl::Status LeaseElectionBackend::Renew(json base) {
  json& spec = WritableSpec(base);
  spec["holderIdentity"] = options_.id;
  spec["leaseDurationSeconds"] = ttl_seconds_;
  spec["acquireTime"] = acquired_at_;
  spec["renewTime"] = MicroTimeNow();
  auto renewed = Written(client_->Replace(path_, base), absl::StrCat("renewing Lease ", path_));
  if (!renewed.ok()) return renewed.status();
  held_ = *std::move(renewed);
  return absl::OkStatus();
}

absl::StatusOr<etcd::LeaseRenewal> LeaseElectionBackend::KeepAlive(TimePoint) {
  const etcd::LeaseRenewal ours{.ttl_seconds = ttl_seconds_};
  absl::Status renewed = Renew(held_);
  if (renewed.ok()) return ours;
  // Our own TTL with each answer about the Lease: the loss is named by whose
  // it is now, not by a TTL the apiserver never gives.
  const etcd::LeaseRenewal gone{.ttl_seconds = ttl_seconds_, .key = etcd::LeaseRenewal::Key::kGone};
  if (absl::IsNotFound(renewed)) return gone;
  if (!absl::IsAborted(renewed)) return renewed;
  // The version moved: someone else wrote it, or our last renewal landed and
  // its answer was lost. The Lease itself says which.
  auto read = Read();
  if (!read.ok()) return read.status();
  const LeaseView view = ViewOf(*read);
  if (!view.exists) return gone;
  if (!Ours(view)) {
    return etcd::LeaseRenewal{
        .ttl_seconds = ttl_seconds_,
        .key = etcd::LeaseRenewal::Key::kOther,
        .other = view.holder.empty() ? "nobody (released by another hand)" : view.holder};
  }
  if (auto s = Renew(**read); !s.ok()) return s;
  return ours;
}

absl::Status LeaseElectionBackend::Resign(TimePoint) {
  if (acquired_at_.empty()) return absl::OkStatus();
  json base = held_;
  for (int attempt = 0;; ++attempt) {
    json& spec = WritableSpec(base);
    // As client-go releases: no holder, a one-second duration.
    spec.erase("holderIdentity");
    spec["leaseDurationSeconds"] = 1;
    spec["renewTime"] = MicroTimeNow();
    auto released = client_->Replace(path_, base);
    if (released.ok() || !absl::IsAborted(released.status()) || attempt > 0) {
      return released.status();
    }
    // The version moved: our last renewal's answer was lost, or it is not
    // ours any more (nothing to give up then).
    auto read = Read();
    if (!read.ok()) return read.status();
    if (!Ours(ViewOf(*read))) return absl::OkStatus();
    base = **read;
  }
}

}  // namespace

SleepUntil RealSleepUntil(const base::TimeSource& clock) {
  return [&clock](TimePoint until) {
    const TimePoint now = clock.Now();
    if (until > now) std::this_thread::sleep_for(until - now);
  };
}

std::unique_ptr<ElectionBackend> MakeLeaseElectionBackend(std::unique_ptr<kube::Client> client,
                                                          LeaseElectionOptions options,
                                                          const base::TimeSource& clock,
                                                          SleepUntil sleep_until) {
  return std::make_unique<LeaseElectionBackend>(std::move(client), std::move(options), clock,
                                                std::move(sleep_until));
}

}  // namespace controller::kubernetes
