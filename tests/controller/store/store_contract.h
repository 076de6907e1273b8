// What every Store must do, one suite for all of them: a test file runs it on
// its store with STORE_CONTRACT_TESTS(Fixture, "Name"): Fixture
// default-constructible with `Store& store()`; each test is named
// "<test><Name>".
#pragma once

#include <doctest/doctest.h>
#include <google/protobuf/util/message_differencer.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "controller/store/store.h"
#include "tests/controller/sim_fixture.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace controller::store_contract {

// The names a store's listeners are called with, in order. A listener may be
// called on another thread, and after the test's locals are gone: it shares
// what it records.
class Heard {
 public:
  Store::Listener Listener() const {
    return [state = state_](const std::string& name) {
      absl::MutexLock lock(&state->mu);
      state->names.push_back(name);
    };
  }
  // The names heard, once there are `count` (or 30 s passed).
  std::vector<std::string> Await(size_t count) const {
    testing_support::WaitFor(
        [&] {
          absl::MutexLock lock(&state_->mu);
          return state_->names.size() >= count;
        },
        std::chrono::seconds(30));
    absl::MutexLock lock(&state_->mu);
    return state_->names;
  }

 private:
  struct State {
    absl::Mutex mu;
    std::vector<std::string> names ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

inline bool Same(const ShareRecord& a, const ShareRecord& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

using testing_support::RequireOk;

TEST_CASE_TEMPLATE_DEFINE("optimistic concurrency: a write with a stale resource_version conflicts",
                          F, store_conflicts) {
  F fixture;
  Store& store = fixture.store();
  auto created = store.Create(ServedShare("a"));
  REQUIRE(created.ok());
  CHECK(store.Create(ServedShare("a")).status().code() == absl::StatusCode::kAlreadyExists);
  auto first = *created;
  auto second = *created;
  first.mutable_status()->set_reason("first");
  REQUIRE(store.Update(first).ok());
  second.mutable_status()->set_reason("second");
  const auto conflict = store.Update(second);
  CHECK(IsConflict(conflict.status()));
  CHECK(RequireOk(store.Get("a")).status().reason() == "first");
}

TEST_CASE_TEMPLATE_DEFINE("spec_generation moves with the spec only", F, store_spec_generation) {
  F fixture;
  Store& store = fixture.store();
  auto r = RequireOk(store.Create(ServedShare("a")));
  CHECK(r.spec_generation() == 1);
  r.mutable_status()->set_reason("x");
  r = RequireOk(store.Update(r));
  CHECK(r.spec_generation() == 1);
  r.mutable_spec()->set_serve(false);
  r = RequireOk(store.Update(r));
  CHECK(r.spec_generation() == 2);
  CHECK(RequireOk(store.Get("a")).spec_generation() == 2);
}

TEST_CASE_TEMPLATE_DEFINE("watchers hear about every change", F, store_watchers) {
  F fixture;
  Store& store = fixture.store();
  Heard heard;
  store.Watch(heard.Listener());
  auto r = RequireOk(store.Create(ServedShare("a")));
  REQUIRE(store.Update(r).ok());
  REQUIRE(store.Delete("a").ok());
  CHECK(heard.Await(3) == std::vector<std::string>{"a", "a", "a"});
}

TEST_CASE_TEMPLATE_DEFINE("Update and Delete of a share the store does not hold are NotFound", F,
                          store_not_found) {
  F fixture;
  Store& store = fixture.store();
  CHECK(store.Update(ServedShare("nope")).status().code() == absl::StatusCode::kNotFound);
  CHECK(store.Delete("nope").code() == absl::StatusCode::kNotFound);
  CHECK(store.Get("nope").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE_TEMPLATE_DEFINE("Get and List return each record as its last write returned it", F,
                          store_reads) {
  F fixture;
  Store& store = fixture.store();
  CHECK(RequireOk(store.List()).empty());
  auto a = RequireOk(store.Create(ServedShare("a")));
  const auto b = RequireOk(store.Create(ServedShare("b")));
  CHECK(b.resource_version() > a.resource_version());
  a.mutable_status()->set_epoch(3);
  a = RequireOk(store.Update(a));
  CHECK(a.resource_version() > b.resource_version());
  CHECK(Same(RequireOk(store.Get("a")), a));
  CHECK(Same(RequireOk(store.Get("b")), b));
  const auto listed = RequireOk(store.List());
  REQUIRE(listed.size() == 2);
  for (const auto& record : listed) {
    CAPTURE(record.ShortDebugString());
    CHECK(Same(record, record.name() == "a" ? a : b));
  }
}

TEST_CASE_TEMPLATE_DEFINE(
    "a share deleted and created again refuses a write carrying its old version", F,
    store_recreated) {
  F fixture;
  Store& store = fixture.store();
  auto old = RequireOk(store.Create(ServedShare("a")));
  REQUIRE(store.Delete("a").ok());
  const auto again = RequireOk(store.Create(ServedShare("a")));
  CHECK(again.spec_generation() == 1);
  old.mutable_status()->set_reason("stale");
  CHECK(IsConflict(store.Update(old).status()));
  CHECK(Same(RequireOk(store.Get("a")), again));
}

}  // namespace controller::store_contract

#define STORE_CONTRACT_TESTS(Fixture, name)                                                   \
  TYPE_TO_STRING_AS(name, Fixture);                                                           \
  TEST_CASE_TEMPLATE_APPLY(controller::store_contract::store_conflicts, std::tuple<Fixture>); \
  TEST_CASE_TEMPLATE_APPLY(controller::store_contract::store_spec_generation,                 \
                           std::tuple<Fixture>);                                              \
  TEST_CASE_TEMPLATE_APPLY(controller::store_contract::store_watchers, std::tuple<Fixture>);  \
  TEST_CASE_TEMPLATE_APPLY(controller::store_contract::store_not_found, std::tuple<Fixture>); \
  TEST_CASE_TEMPLATE_APPLY(controller::store_contract::store_reads, std::tuple<Fixture>);     \
  TEST_CASE_TEMPLATE_APPLY(controller::store_contract::store_recreated, std::tuple<Fixture>)
