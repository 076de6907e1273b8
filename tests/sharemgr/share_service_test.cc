// The gRPC service's own rules, called directly: epoch fencing and one
// filesystem operation at a time.
#include "sharemgr/share_service.h"

#include <doctest/doctest.h>
#include <grpcpp/server_context.h>

#include <condition_variable>
#include <future>
#include <thread>

namespace sharemgr {
namespace {

namespace v1 = sharemanager::v1;

// Stands in for the supervisor loop: runs each posted task on a thread.
struct FakeLoop {
  void Post(std::function<void()> task) { std::thread(std::move(task)).detach(); }
};

}  // namespace

TEST_CASE("mutations carrying another epoch are refused, 0 is unchecked") {
  StatusBoard board;
  FakeLoop loop;
  ShareService service(
      board,
      ShareCommands{.post = [&](std::function<void()> t) { loop.Post(std::move(t)); },
                    .mount = [](uint64_t g) -> absl::StatusOr<uint64_t> { return g; },
                    .unmount = [] { return absl::OkStatus(); }},
      3);
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
  request.set_epoch(0);
  CHECK(service.Mount(&context, &request, &response).ok());
}

TEST_CASE("a second trim while one runs is refused, not queued") {
  StatusBoard board;
  FakeLoop loop;
  std::promise<void> started, release;
  auto release_future = release.get_future().share();
  ShareService service(
      board,
      ShareCommands{.post = [&](std::function<void()> t) { loop.Post(std::move(t)); },
                    .trim = [&, release_future]() -> absl::StatusOr<uint64_t> {
                      started.set_value();
                      release_future.wait();
                      return 4096;
                    }},
      0);
  v1::FilesystemTrimResponse first_response;
  std::thread first([&] {
    grpc::ServerContext context;
    v1::FilesystemTrimRequest request;
    CHECK(service.FilesystemTrim(&context, &request, &first_response).ok());
  });
  started.get_future().wait();
  grpc::ServerContext context;
  v1::FilesystemTrimRequest request;
  v1::FilesystemTrimResponse response;
  const auto refused = service.FilesystemTrim(&context, &request, &response);
  CHECK(refused.error_code() == grpc::StatusCode::ABORTED);
  CHECK(refused.error_message().find("refused (not queued)") != std::string::npos);
  release.set_value();
  first.join();
  CHECK(first_response.bytes_trimmed() == 4096);
}

TEST_CASE("without a block device, trim and resize say so") {
  StatusBoard board;
  ShareService service(board, ShareCommands{}, 0);
  grpc::ServerContext context;
  v1::FilesystemResizeRequest request;
  v1::FilesystemResizeResponse response;
  const auto status = service.FilesystemResize(&context, &request, &response);
  CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
  CHECK(status.error_message().find("--device") != std::string::npos);
}

}  // namespace sharemgr
