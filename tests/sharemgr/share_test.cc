// The export's lifecycle without ganesha: Mount by generation and Unmount,
// the ganesha.conf each leaves, and the reloads (SIGHUPs) each asks for.
#include "sharemgr/share.h"

#include <doctest/doctest.h>

#include <limits>
#include <optional>

#include "base/files.h"
#include "tests/support/temp_dir.h"

namespace sharemgr {
namespace {

struct Fixture {
  Fixture() {
    auto config = GaneshaConfig::Create({.volume = "pvc-1",
                                         .export_dir = dir.path() + "/export",
                                         .bind_address = "127.0.0.1",
                                         .nfs_port = 20490,
                                         .grace_seconds = 90,
                                         .lease_seconds = 60,
                                         .recovery_root = dir.path() + "/recovery",
                                         .plugins_dir = "/usr/lib/x86_64-linux-gnu/ganesha"});
    REQUIRE(config.ok());
    share.emplace(*std::move(config), path(), [this] { ++reloads; });
    REQUIRE(share->WriteConfig().ok());
  }
  std::string path() const { return dir.path() + "/ganesha.conf"; }
  bool Exported() const {
    auto text = base::ReadFile(path());
    REQUIRE(text.ok());
    return text->find("EXPORT {") != std::string::npos;
  }

  testing_support::TempDir dir;
  int reloads = 0;
  std::optional<Share> share;
};

}  // namespace

TEST_CASE("Mount: a handled generation changes nothing while exported, 0 asks for one more") {
  Fixture f;
  CHECK(*f.share->Mount(3) == 3);
  CHECK(f.reloads == 1);
  CHECK(*f.share->Mount(3) == 3);  // the same request again: no reload
  CHECK(*f.share->Mount(2) == 3);  // an older one: neither
  CHECK(f.reloads == 1);
  CHECK(*f.share->Mount(0) == 4);
  CHECK(f.reloads == 2);
  CHECK(*f.share->Mount(9) == 9);
  CHECK(f.reloads == 3);
}

TEST_CASE(
    "Unmount withdraws the export from ganesha.conf, and Mount of a handled generation restores "
    "it") {
  Fixture f;
  CHECK(*f.share->Mount(2) == 2);
  REQUIRE(f.Exported());
  REQUIRE(f.share->Unmount().ok());
  CHECK_FALSE(f.Exported());
  CHECK(f.reloads == 2);
  CHECK(*f.share->Mount(2) == 2);  // handled, but withdrawn since: exported again
  CHECK(f.Exported());
  CHECK(f.reloads == 3);
}

TEST_CASE("Mount refuses a generation more than the allowed step ahead, before touching anything") {
  Fixture f;
  REQUIRE(f.share->Mount(5).ok());
  const auto far = f.share->Mount(5 + Share::kMaxGenerationStep + 1);
  CHECK(far.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.reloads == 1);  // refused before anything was rewritten
  const auto farthest = f.share->Mount(std::numeric_limits<uint64_t>::max());
  CHECK(farthest.status().code() == absl::StatusCode::kInvalidArgument);
  // The largest step allowed is taken; the handled generation is what it says.
  CHECK(*f.share->Mount(5 + Share::kMaxGenerationStep) == 5 + Share::kMaxGenerationStep);
}

TEST_CASE("Fence withdraws the export for good: ganesha.conf, readiness, Mount refused, status") {
  Fixture f;
  REQUIRE(f.Exported());
  f.share->Fence("lease lost: test");
  CHECK_FALSE(f.Exported());
  CHECK(f.reloads == 1);
  const auto ready = f.share->CheckReady();
  CHECK(ready.code() == absl::StatusCode::kUnavailable);
  CHECK(ready.message() == "lease lost: test");
  const auto mount = f.share->Mount(0);
  CHECK(mount.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(mount.status().message() == "export withdrawn for good: lease lost: test");
  CHECK_FALSE(f.Exported());
  // A repair giving the volume back does not bring the export back either.
  f.share->SetVolumeAvailable(false);
  f.share->SetVolumeAvailable(true);
  CHECK_FALSE(f.Exported());
  sharemanager::v1::ShareStatus status;
  f.share->Fill(status);
  CHECK_FALSE(status.exported());
  // Fenced twice: nothing more happens.
  const int reloads = f.reloads;
  f.share->Fence("again");
  CHECK(f.reloads == reloads);
  CHECK(f.share->CheckReady().message() == "lease lost: test");
}

TEST_CASE("a repair counts one remount generation and one volume repair, a Mount no repair") {
  Fixture f;
  CHECK(*f.share->Mount(0) == 1);
  f.share->CountRemount();
  f.share->CountRemount();
  sharemanager::v1::ShareStatus status;
  f.share->Fill(status);
  CHECK(status.remount_generation() == 3);
  CHECK(status.volume_repairs() == 2);
}

}  // namespace sharemgr
