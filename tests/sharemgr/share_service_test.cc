// The gRPC service's own rules, called directly: epoch fencing, and volume
// operations handed to the volume's owner with the caller's deadline.
#include "sharemgr/share_service.h"

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_context.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/wait_for.h"

namespace sharemgr {
namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;

// Stands in for the supervisor loop: runs each posted task on a thread of its
// own, all joined when it ends (declare it after what its tasks touch).
struct FakeLoop {
  void Post(std::function<void()> task) {
    std::lock_guard lock(mu);
    threads.emplace_back(std::move(task));
  }
  std::mutex mu;
  std::vector<std::jthread> threads;
};

// Commands run on `loop`: a mount answers its generation, an unmount is
// counted in `unmounts` (both outlive the service that calls them).
ShareCommands MountAndCountUnmounts(FakeLoop& loop, std::atomic<int>& unmounts) {
  return ShareCommands{.post = [&loop](std::function<void()> t) { loop.Post(std::move(t)); },
                       .mount = [](uint64_t g) -> absl::StatusOr<uint64_t> { return g; },
                       .unmount =
                           [&unmounts] {
                             ++unmounts;
                             return absl::OkStatus();
                           }};
}

using SystemClock = std::chrono::system_clock;

// A supervisor loop that is busy for good: it takes every task and never runs
// it (kept, so that the handler's promise stays pending, not broken).
struct StuckLoop {
  std::mutex mu;
  std::vector<std::function<void()>> tasks;
  void Post(std::function<void()> task) {
    std::lock_guard lock(mu);
    tasks.push_back(std::move(task));
  }
  size_t Posted() {
    std::lock_guard lock(mu);
    return tasks.size();
  }
};

}  // namespace

TEST_CASE(
    "a mutation the busy loop never runs answers DEADLINE_EXCEEDED after 10 s, reads answer at "
    "once meanwhile") {
  StatusBoard board;
  board.Update([](v1::ShareStatus& s) {
    s.set_state(v1::SERVING);
    s.set_volume("pvc-busy");
  });
  StuckLoop loop;
  std::vector<ShareCommands::Deadline> attach_deadlines;
  ShareService service(
      board,
      ShareCommands{.post = [&](std::function<void()> t) { loop.Post(std::move(t)); },
                    .mount = [](uint64_t g) -> absl::StatusOr<uint64_t> { return g; },
                    .attach_volume =
                        [&](ShareCommands::Deadline d) {
                          attach_deadlines.push_back(d);
                          return absl::OkStatus();
                        }},
      ShareServiceLimits{});
  // The caller sent no deadline at all (a ServerContext's is infinite).
  const auto start = SystemClock::now();
  auto mount = std::async(std::launch::async, [&] {
    grpc::ServerContext context;
    v1::MountRequest request;
    v1::MountResponse response;
    const auto status = service.Mount(&context, &request, &response);
    return std::pair{status, SystemClock::now() - start};
  });
  REQUIRE(testing_support::WaitFor([&] { return loop.Posted() == 1; }, milliseconds(5000)));
  // The Mount is waiting on the loop: a status read does not queue behind it.
  for (int i = 0; i < 5; ++i) {
    grpc::ServerContext context;
    v1::GetStatusRequest request;
    v1::ShareStatus status;
    const auto read_start = SystemClock::now();
    REQUIRE(service.GetStatus(&context, &request, &status).ok());
    CHECK(SystemClock::now() - read_start < milliseconds(1000));  // not the Mount's 10 s
    CHECK(status.volume() == "pvc-busy");
    CHECK(status.state() == v1::SERVING);
  }
  CHECK(mount.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  REQUIRE(mount.wait_for(std::chrono::seconds(15)) == std::future_status::ready);
  const auto [status, took] = mount.get();
  CHECK(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(took >= std::chrono::seconds(10));
  CHECK(took < milliseconds(11'000));  // 10 s, then at most one 250 ms re-check
  // The volume step before the loop got the same 10 s bound, not "never".
  REQUIRE(attach_deadlines.size() == 1);
  CHECK(attach_deadlines[0] <= start + std::chrono::seconds(10) + milliseconds(100));
  CHECK(attach_deadlines[0] >= start + std::chrono::seconds(9));
}

TEST_CASE("a fenced share-manager refuses mutations carrying another epoch or none") {
  StatusBoard board;
  std::atomic<int> unmounts{0};
  FakeLoop loop;
  ShareService service(board, MountAndCountUnmounts(loop, unmounts),
                       ShareServiceLimits{.epoch = 3});
  grpc::ServerContext context;
  v1::MountRequest request;
  v1::MountResponse response;
  request.set_epoch(2);
  request.set_generation(5);
  CHECK(service.Mount(&context, &request, &response).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  request.set_epoch(3);
  CHECK(service.Mount(&context, &request, &response).ok());
  CHECK(response.handled_generation() == 5);
  request.set_epoch(0);  // "unset" is not a way around the fence
  CHECK(service.Mount(&context, &request, &response).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  request.set_epoch(4);  // a newer epoch is not this server's either
  CHECK(service.Mount(&context, &request, &response).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);

  v1::UnmountRequest unmount;
  v1::UnmountResponse unmounted;
  unmount.set_epoch(2);
  CHECK(service.Unmount(&context, &unmount, &unmounted).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(unmounts == 0);  // refused before anything was withdrawn
  unmount.set_epoch(0);
  CHECK(service.Unmount(&context, &unmount, &unmounted).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(unmounts == 0);
  unmount.set_epoch(3);
  CHECK(service.Unmount(&context, &unmount, &unmounted).ok());
  CHECK(unmounts == 1);
}

TEST_CASE("volume operations get a capped deadline, and their refusal verbatim") {
  StatusBoard board;
  std::vector<ShareCommands::Deadline> seen;
  FakeLoop loop;
  ShareService service(
      board,
      ShareCommands{.post = [&](std::function<void()> t) { loop.Post(std::move(t)); },
                    .trim = [&](ShareCommands::Deadline d) -> absl::StatusOr<uint64_t> {
                      seen.push_back(d);
                      if (seen.size() == 1) return 4096;
                      return absl::UnavailableError("trim refused: repairing the filesystem");
                    }},
      ShareServiceLimits{.max_volume_op_time = std::chrono::minutes(10)});
  v1::FilesystemTrimRequest request;
  v1::FilesystemTrimResponse response;
  {
    grpc::ServerContext context;  // no deadline: capped by max_volume_op_time
    CHECK(service.FilesystemTrim(&context, &request, &response).ok());
    CHECK(response.bytes_trimmed() == 4096);
  }
  const auto now = std::chrono::system_clock::now();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] <= now + std::chrono::minutes(10));
  CHECK(seen[0] > now + std::chrono::minutes(9));
  {
    grpc::ServerContext context;
    const auto refused = service.FilesystemTrim(&context, &request, &response);
    CHECK(refused.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK(refused.error_message() == "trim refused: repairing the filesystem");
  }
  CHECK(seen.size() == 2);
}

TEST_CASE("without a block device, trim and resize say so") {
  StatusBoard board;
  ShareService service(board, ShareCommands{}, ShareServiceLimits{});
  grpc::ServerContext context;
  v1::FilesystemResizeRequest request;
  v1::FilesystemResizeResponse response;
  const auto status = service.FilesystemResize(&context, &request, &response);
  CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
  CHECK(status.error_message().find("--device") != std::string::npos);
}

TEST_CASE(
    "an unfenced share-manager takes epoch 0 and refuses a call meant for an epoch, saying it is "
    "unfenced and naming both epochs") {
  StatusBoard board;
  std::atomic<int> unmounts{0};
  FakeLoop loop;
  ShareService service(board, MountAndCountUnmounts(loop, unmounts), ShareServiceLimits{});
  grpc::ServerContext context;
  v1::MountRequest request;
  v1::MountResponse response;
  request.set_generation(1);
  CHECK(service.Mount(&context, &request, &response).ok());
  request.set_epoch(2);  // a controller fencing at 2 did not start this server
  const auto refused = service.Mount(&context, &request, &response);
  CHECK(refused.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  // The caller must learn the fence it counts on is not there, not that it is stale.
  CHECK_MESSAGE(refused.error_message().find("request carries epoch 2") != std::string::npos,
                refused.error_message());
  CHECK_MESSAGE(refused.error_message().find("unfenced (epoch 0") != std::string::npos,
                refused.error_message());

  v1::UnmountRequest unmount;
  v1::UnmountResponse unmounted;
  unmount.set_epoch(7);
  const auto withdrawn = service.Unmount(&context, &unmount, &unmounted);
  CHECK(withdrawn.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(withdrawn.error_message().find("epoch 7") != std::string::npos);
  CHECK(unmounts == 0);  // refused before anything was withdrawn
  unmount.set_epoch(0);
  CHECK(service.Unmount(&context, &unmount, &unmounted).ok());
  CHECK(unmounts == 1);
}

TEST_CASE("mutations beyond the cap are refused with RESOURCE_EXHAUSTED, the slot comes back") {
  StatusBoard board;
  absl::Mutex mu;
  bool release = false;
  std::atomic<int> running{0};
  FakeLoop loop;
  ShareService service(
      board,
      ShareCommands{.post = [&](std::function<void()> t) { loop.Post(std::move(t)); },
                    .mount = [&](uint64_t g) -> absl::StatusOr<uint64_t> {
                      ++running;
                      absl::MutexLock lock(&mu);
                      mu.Await(absl::Condition(&release));
                      return g;
                    }},
      ShareServiceLimits{.max_changes = 2});
  auto mount = [&service](uint64_t generation) {
    grpc::ServerContext context;
    v1::MountRequest request;
    v1::MountResponse response;
    request.set_generation(generation);
    return service.Mount(&context, &request, &response).error_code();
  };
  std::vector<std::thread> holders;
  std::vector<grpc::StatusCode> held(2);
  for (size_t i = 0; i < 2; ++i) holders.emplace_back([&, i] { held[i] = mount(i + 1); });
  while (running.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(mount(3) == grpc::StatusCode::RESOURCE_EXHAUSTED);
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  for (auto& t : holders) t.join();
  CHECK(held[0] == grpc::StatusCode::OK);
  CHECK(held[1] == grpc::StatusCode::OK);
  CHECK(mount(4) == grpc::StatusCode::OK);  // both slots were given back
}

TEST_CASE(
    "changes left queued on a busy loop by callers that gave up are capped: beyond, "
    "RESOURCE_EXHAUSTED at once with nothing queued, reads and health answer, the loop catches "
    "up") {
  StatusBoard board;
  board.Update([](v1::ShareStatus& s) { s.set_state(v1::SERVING); });
  StuckLoop loop;
  std::atomic<bool> stuck{true};
  ShareService service(
      board,
      ShareCommands{.post =
                        [&](std::function<void()> t) {
                          if (stuck) {
                            loop.Post(std::move(t));
                          } else {
                            t();  // the loop keeps up again
                          }
                        },
                    .mount = [](uint64_t g) -> absl::StatusOr<uint64_t> { return g; }},
      ShareServiceLimits{.max_queued_changes = 4});
  // Over a real (in-process) channel: a caller's deadline is what a server sees.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  auto channel = server->InProcessChannel({});
  auto stub = v1::ShareManager::NewStub(channel);
  auto mount = [&](milliseconds deadline) {
    grpc::ClientContext context;
    context.set_deadline(SystemClock::now() + deadline);
    v1::MountResponse response;
    return stub->Mount(&context, {}, &response);
  };

  for (int i = 0; i < 4; ++i) {
    CHECK(mount(milliseconds(50)).error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  REQUIRE(loop.Posted() == 4);  // each caller gave up; its task stays queued
  for (int i = 0; i < 20; ++i) {
    const auto refused = mount(milliseconds(5000));
    CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(refused.error_message().find("queued") != std::string::npos);
  }
  CHECK(loop.Posted() == 4);  // the queue did not grow
  {
    grpc::ClientContext context;
    context.set_deadline(SystemClock::now() + milliseconds(2000));
    v1::ShareStatus status;
    CHECK(stub->GetStatus(&context, {}, &status).ok());
    CHECK(status.state() == v1::SERVING);
  }
  {
    grpc::ClientContext context;
    context.set_deadline(SystemClock::now() + milliseconds(2000));
    grpc::health::v1::HealthCheckResponse health;
    CHECK(grpc::health::v1::Health::NewStub(channel)->Check(&context, {}, &health).ok());
  }

  // The loop runs what was queued: the slots come back, changes go through.
  stuck = false;
  std::vector<std::function<void()>> queued;
  {
    std::lock_guard lock(loop.mu);
    queued.swap(loop.tasks);
  }
  for (auto& task : queued) task();
  queued.clear();
  CHECK(mount(milliseconds(5000)).ok());
  server->Shutdown();
}

}  // namespace sharemgr
