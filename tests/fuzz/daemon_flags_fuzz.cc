// The daemon's command line (a pod spec's args, a wrapper's flags): parsed by
// CLI11 as `share-manager daemon` parses it, then ResolveDaemonConfig. Must
// never crash; whatever it accepts must pass GaneshaConfig::Create again and
// render a ganesha.conf that reads back to it. Input: the arguments,
// NUL-separated.
#include <CLI/CLI.hpp>
#include <string>

#include "sharemgr/daemon_config.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/ganesha_conf_reader.h"

using fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = fuzz::Fields(data, size);
  std::vector<const char*> argv = {"share-manager"};
  for (const auto& a : args) argv.push_back(a.c_str());
  // Built once (it is most of the time a run takes): each run starts from
  // the defaults again and clears what the last parse saw.
  static sharemgr::DaemonFlags flags;
  static CLI::App& app = *[] {
    auto* a = new CLI::App;
    sharemgr::AddDaemonFlags(*a, flags);
    return a;
  }();
  flags = sharemgr::DaemonFlags{};
  app.clear();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    return 0;  // refused (or --help): share-manager prints it and exits
  }
  auto config = sharemgr::ResolveDaemonConfig(flags);
  if (!config.ok()) {
    Check(!config.status().message().empty(), "a refused flag set says why");
    return 0;
  }
  const sharemgr::GaneshaConfigInput& in = config->ganesha.input();
  Check(sharemgr::GaneshaConfig::Create(in).ok(), "accepted flags make a valid GaneshaConfig");
  for (bool with_export : {false, true}) {
    const std::string text = config->ganesha.Render(with_export);
    auto back = fuzz::ReadGaneshaConf(text, with_export);
    Check(back.ok(), "the daemon's ganesha.conf parses", back.status().ToString() + "\n" + text);
    const std::string diff = fuzz::Diff(in, *back, with_export);
    Check(diff.empty(), "the daemon's ganesha.conf reads back to its input", diff);
  }
  const auto& sup = config->supervisor;
  const auto op_time =
      std::chrono::duration_cast<base::Duration>(config->limits.max_volume_op_time);
  for (base::Duration d :
       {sup.probe_interval, sup.start_timeout, sup.stop_timeout, sup.failed_linger,
        base::Duration(sup.restart.death_window), config->volume_owner.repair_window, op_time,
        config->volume_probe_interval}) {
    Check(d.count() >= 0 && d.count() <= 86'400'000, "every duration is between 0 and a day");
  }
  Check(sup.probe_interval.count() >= 50 && sup.probe_failures >= 1,
        "the probe runs at most every 50 ms and needs a miss");
  if (config->volume) {
    Check(config->volume->target == in.export_dir, "the volume is mounted where it is exported");
    for (const auto& o : config->volume->mount_options) {
      Check(!o.empty() && o.find(',') == std::string::npos, "a mount option is one option", o);
    }
  }
  return 0;
}
