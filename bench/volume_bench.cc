// Volume failure detection and repair (docs/BENCHMARKS.md): a read-only
// remount by someone else, and an ext4 filesystem error, on a real loop
// device under a real share-manager with its default --volume-probe-interval.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "bench/abort_run.h"
#include "bench/series.h"
#include "tests/support/daemon_process.h"
#include "tests/support/loop_device.h"

namespace {

namespace v1 = sharemanager::v1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using bench::Series;

// Times the first DEGRADED and the SERVING with a higher generation after `fault`.
void Measure(testing_support::DaemonProcess& d, const std::function<void()>& fault,
             Series& detected, Series& serving) {
  const uint64_t generation = bench::ValueOrAbort(d.Status(), "GetStatus").remount_generation();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = d.Stub()->WatchStatus(&context, v1::WatchStatusRequest());
  v1::ShareStatus s;
  if (!stream->Read(&s)) throw bench::AbortRun("WatchStatus gave no first status");
  const auto t0 = Clock::now();
  fault();
  std::optional<Clock::time_point> degraded, back;
  while (stream->Read(&s)) {
    if (!degraded && s.state() == v1::DEGRADED) degraded = Clock::now();
    if (s.state() == v1::SERVING && s.remount_generation() > generation) {
      back = Clock::now();
      break;
    }
  }
  context.TryCancel();
  detected.Record(t0, degraded);
  serving.Record(degraded.value_or(t0), degraded ? back : std::nullopt);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  CLI::App app{"volume failure detection and repair benchmark (see docs/BENCHMARKS.md)"};
  app.add_option("--runs", runs, "Runs per failure kind")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto loop = testing_support::LoopDevice::Create("64M", "ext4");
  if (!loop.ok()) {
    std::cerr << loop.status() << "\n";
    return 1;
  }
  auto d = testing_support::DaemonProcess::Start(
      // Every run causes one full repair: lift the repair budget (3 per hour by default).
      {.volume = "bench",
       .extra_flags = {"--device", (*loop)->path(), "--log-level", "warn", "--max-repairs",
                       "1000"}});
  if (!d.ok()) {
    std::cerr << d.status() << "\n";
    return 1;
  }
  try {
    Series ro_detected("remount,ro by someone else -> DEGRADED (detected)");
    Series ro_serving("detected -> SERVING again (remounted read-write)");
    for (int i = 0; i < runs; ++i) {
      Measure(
          **d,
          [&] {
            (void)testing_support::Run({"mount", "-o", "remount,ro", (*d)->export_dir()});
          },
          ro_detected, ro_serving);
      std::this_thread::sleep_for(milliseconds(300));
    }
    const std::string trigger = "/sys/fs/ext4/" +
                                std::filesystem::path((*loop)->path()).filename().string() +
                                "/trigger_fs_error";
    Series err_detected("ext4 error -> DEGRADED (detected by the probe)");
    Series err_serving("detected -> SERVING again (unexport, unmount, e2fsck, mount, re-export)");
    for (int i = 0; i < runs; ++i) {
      Measure(
          **d, [&] { std::ofstream(trigger) << "bench error\n"; }, err_detected, err_serving);
      std::this_thread::sleep_for(milliseconds(300));
    }
    std::cout << "## Volume benchmark (" << runs
              << " runs each; 64 MiB ext4 loop device, --volume-probe-interval 1s)\n\n"
              << bench::Series::kHeader << ro_detected.Row() << "\n"
              << ro_serving.Row() << "\n"
              << err_detected.Row() << "\n"
              << err_serving.Row() << "\n";
  } catch (const bench::AbortRun& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
