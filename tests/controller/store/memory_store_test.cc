#include "controller/store/memory_store.h"

#include <doctest/doctest.h>
#include <google/protobuf/util/message_differencer.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "controller/testing/faulty_store.h"
#include "tests/controller/store/store_contract.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"

namespace controller {
namespace {

using testing_support::RequireOk;
using testing_support::TempDir;

struct MemoryStoreFixture {
  MemoryStore memory;
  Store& store() { return memory; }
};

// OpenFile refuses `path` with `code` and a message containing `names`.
void CheckRefused(const std::string& path, absl::StatusCode code, const std::string& names) {
  const auto opened = MemoryStore::OpenFile(path);
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().code() == code);
  CHECK_MESSAGE(opened.status().message().find(names) != absl::string_view::npos,
                opened.status().ToString());
}

}  // namespace
}  // namespace controller

STORE_CONTRACT_TESTS(controller::MemoryStoreFixture, "MemoryStore");

namespace controller {

TEST_CASE("a file-backed store survives a restart") {
  TempDir dir;
  const std::string path = dir.path() + "/store.jsonl";
  {
    auto store = MemoryStore::OpenFile(path);
    REQUIRE(store.ok());
    auto r = RequireOk((*store)->Create(ServedShare("a")));
    r.mutable_status()->set_epoch(4);
    REQUIRE((*store)->Update(r).ok());
    REQUIRE((*store)->Create(ServedShare("b")).ok());
  }
  auto reopened = MemoryStore::OpenFile(path);
  REQUIRE(reopened.ok());
  CHECK(RequireOk((*reopened)->Get("a")).status().epoch() == 4);
  CHECK(RequireOk((*reopened)->List()).size() == 2);
  // Versions continue past the loaded ones: no stale write can sneak in.
  auto b = RequireOk((*reopened)->Get("b"));
  auto a = RequireOk((*reopened)->Get("a"));
  CHECK(RequireOk((*reopened)->Update(b)).resource_version() > a.resource_version());
  {
    std::ofstream corrupt(path, std::ios::app);
    corrupt << "{not json\n";
  }
  CheckRefused(path, absl::StatusCode::kDataLoss, path + ":3:");
}

TEST_CASE("reopening a store file gives the same records at the same versions") {
  TempDir dir;
  const std::string path = dir.path() + "/store.jsonl";
  std::map<std::string, ShareRecord> written;
  {
    auto store = MemoryStore::OpenFile(path);
    REQUIRE(store.ok());
    for (const char* name : {"a", "b", "c"}) {
      auto created = (*store)->Create(ServedShare(name));
      REQUIRE(created.ok());
      created->mutable_status()->set_epoch(7);
      auto updated = (*store)->Update(*created);
      REQUIRE(updated.ok());
      written[name] = *updated;
    }
    REQUIRE((*store)->Delete("b").ok());
    written.erase("b");
  }
  auto reopened = MemoryStore::OpenFile(path);
  REQUIRE(reopened.ok());
  auto listed = (*reopened)->List();
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == written.size());
  for (const auto& record : *listed) {
    CAPTURE(record.ShortDebugString());
    REQUIRE(written.contains(record.name()));
    CHECK(google::protobuf::util::MessageDifferencer::Equals(record, written[record.name()]));
  }
}

TEST_CASE("a directory where the store file should be is refused, not an empty store") {
  TempDir dir;
  const std::string path = dir.path() + "/store.jsonl";
  REQUIRE(std::filesystem::create_directory(path));
  CheckRefused(path, absl::StatusCode::kFailedPrecondition, path);
}

TEST_CASE("a corrupt line anywhere in the store file refuses it, naming the line") {
  TempDir dir;
  const std::string path = dir.path() + "/store.jsonl";
  {
    auto store = MemoryStore::OpenFile(path);
    REQUIRE(store.ok());
    REQUIRE((*store)->Create(ServedShare("a")).ok());
  }
  {
    std::ofstream out(path, std::ios::app);
    out << "{\"name\": \"b\", \"spec\": 3}\n";  // valid JSON, not a ShareRecord
  }
  CheckRefused(path, absl::StatusCode::kDataLoss, path + ":2:");
}

TEST_CASE("many writes leave only the store file beside it and no fd open on it") {
  TempDir dir;
  const std::string path = dir.path() + "/store.jsonl";
  auto store = MemoryStore::OpenFile(path);
  REQUIRE(store.ok());
  auto record = (*store)->Create(ServedShare("a"));
  REQUIRE(record.ok());
  for (int i = 0; i < 100; ++i) {
    record->mutable_status()->set_epoch(static_cast<uint64_t>(i));
    record = (*store)->Update(*record);
    REQUIRE(record.ok());
  }
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename());
  }
  CHECK(names == std::vector<std::string>{"store.jsonl"});
  // The store keeps no fd between writes, so none can leak into a pod the
  // controller spawns (and the ones it opens briefly are O_CLOEXEC).
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    CHECK_MESSAGE(target.string().find(dir.path()) == std::string::npos, target.string());
  }
}

TEST_CASE(
    "a Create, Update or Delete that cannot be written to the store file is undone in memory") {
  testing_support::TempDir dir;
  const std::string sub = dir.path() + "/store";
  std::filesystem::create_directory(sub);
  auto opened = MemoryStore::OpenFile(sub + "/shares");
  REQUIRE(opened.ok());
  MemoryStore& store = **opened;
  auto a = store.Create(ServedShare("a"));
  REQUIRE(a.ok());
  std::filesystem::remove_all(sub);  // every later write fails: no directory for its temp file

  CHECK_FALSE(store.Create(ServedShare("b")).ok());
  CHECK(store.Get("b").status().code() == absl::StatusCode::kNotFound);
  ShareRecord changed = *a;
  changed.mutable_spec()->set_serve(false);
  CHECK_FALSE(store.Update(changed).ok());
  CHECK(store.Get("a")->spec().serve());
  CHECK_FALSE(store.Delete("a").ok());
  CHECK(store.Get("a").ok());
}

TEST_CASE("the faulty store fails the k-th call, and a timeout-after still takes effect") {
  MemoryStore memory;
  FaultyStore store(memory);
  store.faults().FailCall(2, Fault::kFail);
  REQUIRE(store.Create(ServedShare("a")).ok());                             // call 1
  CHECK(store.Get("a").status().code() == absl::StatusCode::kUnavailable);  // call 2
  CHECK(store.Get("a").ok());                                               // call 3
  store.faults().FailCall(1, Fault::kTimeoutAfter);
  auto r = RequireOk(memory.Get("a"));
  r.mutable_status()->set_reason("applied");
  CHECK(store.Update(r).status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(RequireOk(memory.Get("a")).status().reason() == "applied");
  store.faults().FailCall(1, Fault::kTimeoutBefore);
  r = RequireOk(memory.Get("a"));
  r.mutable_status()->set_reason("not applied");
  CHECK(store.Update(r).status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(RequireOk(memory.Get("a")).status().reason() == "applied");
}

TEST_CASE("seeded random faults replay identically") {
  auto run = [](uint64_t seed) {
    FaultInjector faults;
    faults.Randomize(seed, 0.3);
    std::vector<int> out;
    for (int i = 0; i < 200; ++i) out.push_back(static_cast<int>(faults.Next()));
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

}  // namespace controller
