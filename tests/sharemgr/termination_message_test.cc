// The termination message kubelet shows for the container: the last error
// share-manager itself logged, written only into a file kubelet made.
#include "sharemgr/termination_message.h"

#include <doctest/doctest.h>
#include <spdlog/logger.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/temp_dir.h"

namespace sharemgr {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("the last error share-manager logged is remembered, not its warnings or infos") {
  auto sink = std::make_shared<LastErrorSink>();
  spdlog::logger logger("share-manager", sink);
  CHECK(sink->last_error().empty());
  logger.error("first error");
  logger.critical("exiting with code 3: ganesha died too often");
  logger.warn("a warning after it");
  logger.info("stopped");
  CHECK(sink->last_error() == "exiting with code 3: ganesha died too often");
}

TEST_CASE("once the exit reason is pinned, no later error replaces it") {
  auto sink = std::make_shared<LastErrorSink>();
  spdlog::logger logger("share-manager", sink);
  logger.error("exiting with code 5: the device is gone");
  sink->Pin();
  logger.error("lease fencer: already stopped");
  CHECK(sink->last_error() == "exiting with code 5: the device is gone");
}

TEST_CASE("the message replaces what the file held, and only in a file that exists") {
  testing_support::TempDir dir;
  const std::string file = dir.path() + "/termination-log";
  std::ofstream(file) << "an older, longer message than the next one";
  WriteTerminationMessage("exiting with code 5: the device is gone", file);
  CHECK(Read(file) == "exiting with code 5: the device is gone");

  const std::string missing = dir.path() + "/not-made-by-kubelet";
  WriteTerminationMessage("exiting with code 3", missing);
  CHECK_FALSE(std::filesystem::exists(missing));
}

TEST_CASE(
    "a message longer than kubelet reads is cut at 4096 bytes, and an empty one writes nothing") {
  testing_support::TempDir dir;
  const std::string file = dir.path() + "/termination-log";
  std::ofstream(file) << "kept";
  WriteTerminationMessage("", file);
  CHECK(Read(file) == "kept");
  WriteTerminationMessage(std::string(5000, 'x'), file);
  CHECK(Read(file).size() == 4096);
}

}  // namespace
}  // namespace sharemgr
