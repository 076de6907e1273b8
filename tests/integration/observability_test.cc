// What an operator sees of a real share-manager and ganesha: the memory bound
// acting on a real ganesha (restarted in place, a death of cause memory, the
// budget spent), `status` / `top` showing the key figures, and the logs as
// JSON lines for a log shipper.
#include <doctest/doctest.h>
#include <signal.h>

#include <fstream>
#include <string>
#include <vector>

#include "base/proc.h"
#include "tests/support/daemon_process.h"
#include "tests/support/json_lines.h"
#include "tests/support/nfs_bulk.h"
#include "tests/support/nfs_client.h"
#include "tests/support/program_process.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::DaemonSpec;
using testing_support::ProgramProcess;
using testing_support::RequireOk;
using testing_support::RunCommand;
using testing_support::ShareManagerBinary;

std::unique_ptr<DaemonProcess> StartDaemon(DaemonSpec spec) {
  auto d = DaemonProcess::Start(std::move(spec));
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(*d);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A daemon whose ganesha idles well under 24 MiB and, with ganesha's stock
// caches, grows over it once it has seen some 10,000 files. Sampled every
// 100 ms; over the limit for 300 ms is too long.
std::unique_ptr<DaemonProcess> StartMemoryBound() {
  return StartDaemon(
      {.extra_flags = {"--ganesha-memory-limit", "24Mi", "--ganesha-memory-grace", "300ms",
                       "--probe-interval", "100ms", "--ganesha-cache-entries", "0",
                       "--ganesha-dir-chunks", "0"}});
}

// Files through NFS until ganesha is killed for its memory (the calls then fail).
void GrowGaneshaUntilKilled(DaemonProcess& d) {
  auto bulk =
      RequireOk(testing_support::NfsBulk::Connect("127.0.0.1", d.nfs_port(), d.pseudo_path()));
  (void)bulk->Create({.root = "/grow", .files = 60'000});
  const auto killed = d.WaitFor([](const v1::ShareStatus& s) { return s.memory_kills() > 0; },
                                milliseconds(20'000), "a memory kill");
  REQUIRE_MESSAGE(killed.ok(), killed.status().ToString());
}

}  // namespace

TEST_CASE(
    "--ganesha-memory-limit: a real ganesha whose RSS stays over it is SIGKILLed and restarted in "
    "place, a death of cause memory, and the new one serves the same files") {
  auto d = StartMemoryBound();
  const auto before = RequireOk(d->Status());
  REQUIRE(before.has_ganesha_usage());
  CHECK(before.ganesha_usage().rss_bytes() < (24u << 20));
  CHECK(before.ganesha_usage().memory_limit_bytes() == (24u << 20));
  CHECK(before.ganesha_usage().samples_allowed() == 4);
  const auto written = d->WriteEventually("/kept.txt", "still here");
  REQUIRE_MESSAGE(written.ok(), written.ToString());

  GrowGaneshaUntilKilled(*d);
  const auto after = d->WaitFor([&](const v1::ShareStatus& s) { return s.state() == v1::SERVING; },
                                milliseconds(20'000), "SERVING again");
  REQUIRE_MESSAGE(after.ok(), after.status().ToString());
  CHECK(after->ganesha_pid() != before.ganesha_pid());
  CHECK(after->memory_kills() == 1);
  CHECK(after->restart_count() == 1);
  CHECK(after->last_exit().cause() == v1::DEATH_MEMORY);
  CHECK(after->last_exit().signal() == SIGKILL);
  CHECK(Contains(after->last_exit().description(), "over the limit of 24.0 MiB in 4 samples"));
  CHECK(Contains(d->output(),
                 "over the limit of 24.0 MiB: restarted when it stays over for 4 samples (300ms)"));
  // The new ganesha starts small again and serves what the old one wrote.
  CHECK(RequireOk(d->ReadEventually("/kept.txt")) == "still here");
  CHECK(RequireOk(d->Status()).ganesha_usage().rss_bytes() < (24u << 20));
}

TEST_CASE("memory kills spend the death budget: over it, FAILED and exit code 3") {
  // Idle ganesha is over 1 MiB: killed at every start, and the first death is one too many.
  auto d = StartDaemon({.extra_flags = {"--ganesha-memory-limit", "1Mi", "--ganesha-memory-grace",
                                        "0s", "--probe-interval", "100ms", "--max-deaths", "0"},
                        .wait_until_serving = false});
  const auto code = d->WaitExit(milliseconds(20'000));
  REQUIRE_MESSAGE(code.ok(), d->output());
  CHECK(*code == 3);
  CHECK(Contains(d->output(), "memory: RSS"));
  CHECK(Contains(d->output(), "exceed the budget of 0"));
}

TEST_CASE(
    "status and top show the key figures: ganesha's memory against its limit, restarts by cause, "
    "repairs, and top redraws them until SIGINT or SIGTERM, then exits 0") {
  auto d = StartMemoryBound();
  GrowGaneshaUntilKilled(*d);
  REQUIRE(d->WaitServing(milliseconds(20'000)).ok());

  const auto status = RunCommand({ShareManagerBinary(), "status", "--addr", d->addr()});
  CHECK(status.exit_code == 0);
  for (const char* line : {"\nganesha memory:  ", " RSS (limit 24.0 MiB), ", " threads, ", " fds, ",
                           "s CPU\n", "\nrestarts:        1 (1 for memory)\n",
                           "\nexit cause:      memory\n", "\nvolume repairs:  0\n"}) {
    CAPTURE(line);
    CHECK(Contains(status.output, line));
  }
  INFO(status.output);

  const auto once = RunCommand({ShareManagerBinary(), "top", "--once", "--addr", d->addr()});
  CHECK(once.exit_code == 0);
  CHECK(once.output.starts_with("share-manager top: " + d->addr() + ", every 1s, "));
  CHECK(Contains(once.output, "\nexit cause:      memory\n"));
  CHECK(Contains(once.output, " RSS (limit 24.0 MiB), "));
  CHECK_FALSE(Contains(once.output, "\x1b["));  // no terminal: no escape codes

  const auto three = RunCommand({ShareManagerBinary(), "top", "--iterations", "3", "--interval",
                                 "100ms", "--addr", d->addr()});
  CHECK(three.exit_code == 0);
  CHECK(Count(three.output, "share-manager top: ") == 3);
  // The CPU rate between two frames of the same ganesha.
  CHECK(Count(three.output, "% since the last frame\n") == 2);

  for (const int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    ProgramProcess top({ShareManagerBinary(), "top", "--interval", "100ms", "--addr", d->addr()});
    REQUIRE(top.WaitOutput("ganesha cpu:", milliseconds(10'000)));  // the second frame
    kill(top.pid(), sig);
    const auto exit = top.WaitExit(milliseconds(5000));
    REQUIRE(exit.has_value());
    CHECK(exit->ShellCode() == 0);
  }

  // On a terminal (script gives it one) each frame clears the screen, and the
  // cursor, hidden meanwhile, is shown again on the way out.
  // exec: whatever shell script runs (its $SHELL, or dash) is replaced by top,
  // so the one child is top itself and not a shell that SIGINT would end alone.
  const std::string command =
      "exec " + ShareManagerBinary() + " top --interval 100ms --addr " + d->addr();
  ProgramProcess script({"script", "-qfec", command, "/dev/null"});
  REQUIRE(script.WaitOutput("ganesha cpu:", milliseconds(10'000)));
  const auto children = base::ProcessChildren(script.pid());
  REQUIRE(children.size() == 1);
  kill(children.front(), SIGINT);
  const auto exit = script.WaitExit(milliseconds(5000));
  REQUIRE(exit.has_value());
  CHECK(exit->ShellCode() == 0);
  CHECK(script.output().starts_with("\x1b[?25l\x1b[H\x1b[2Jshare-manager top: "));
  CHECK(Count(script.output(), "\x1b[H\x1b[2J") >= 2);
  CHECK(script.output().ends_with("\x1b[?25h"));
}

// The line (as ParseJsonLines writes it back) holding every one of `parts`.
std::string LineWith(const std::vector<std::string>& lines, const std::vector<std::string>& parts) {
  for (const auto& line : lines) {
    bool all = true;
    for (const auto& part : parts) all = all && Contains(line, part);
    if (all) return line;
  }
  return "";
}

TEST_CASE(
    "--log-format json: every line share-manager writes parses as one JSON object with time, "
    "level, component, volume, epoch and message, the event's fields, and any bytes escaped") {
  auto d = StartDaemon({.extra_flags = {"--log-format", "json", "--epoch", "5"}});
  const pid_t ganesha = RequireOk(d->Status()).ganesha_pid();
  // ganesha's log lines carry what clients send (file names, say): quotes, a
  // backslash, control characters and bytes that are not UTF-8 pass through.
  std::ofstream(d->state_dir() + "/ganesha.log", std::ios::app)
      << "nfs-ganesha-1[svc_7] test :NFS4 :WARN :odd name \"a\\b\"\r\x01\x1b[31m\t\xff end\n";
  REQUIRE(testing_support::WaitFor([&] { return Contains(d->output(), "odd name"); },
                                   milliseconds(10'000)));
  REQUIRE(testing_support::KillPid(ganesha, SIGKILL) == 0);
  REQUIRE(d->WaitFor(
               [&](const v1::ShareStatus& s) {
                 return s.state() == v1::SERVING && s.ganesha_pid() != ganesha;
               },
               milliseconds(15'000), "SERVING again")
              .ok());
  d->Signal(SIGTERM);
  REQUIRE(RequireOk(d->WaitExit(milliseconds(15'000))) == 0);

  const auto lines = testing_support::ParseJsonLines(d->output());
  REQUIRE_MESSAGE(lines.ok(), lines.status().ToString());
  REQUIRE(lines->size() > 10);
  for (const auto& line : *lines) {
    CAPTURE(line);
    CHECK(Contains(line, "\"volume\": \"pvc-test\""));
    CHECK(Contains(line, "\"epoch\": 5"));
  }
  CHECK_FALSE(
      LineWith(*lines, {"\"component\": \"share-manager\"", "started ganesha pid"}).empty());
  // ganesha's own line, as its logger, level from its WARN, every byte accounted for.
  CHECK_FALSE(LineWith(*lines, {"\"component\": \"ganesha\"", "\"level\": \"warning\"",
                                "odd name \\\"a\\\\b\\\"\\r\\u0001\\u001b[31m\\t\\ufffd end\""})
                  .empty());
  // The death as an event: its fields beside the message.
  const std::string pid = std::to_string(ganesha);
  CHECK_FALSE(LineWith(*lines, {"\"cause\": \"signal\"", "\"signal\": 9", "\"pid\": " + pid + ",",
                                "\"state\": \"DEGRADED\"", "\"previous_state\": \"SERVING\""})
                  .empty());
  CHECK_FALSE(LineWith(*lines, {"\"message\": \"stopped\""}).empty());
}

TEST_CASE("--log-format json: a flag share-manager refuses is one JSON line too, quotes escaped") {
  const testing_support::TempDir dir;
  const auto refused = RunCommand({ShareManagerBinary(), "daemon", "--log-format", "json",
                                   "--volume", "pvc-json", "--export-dir", dir.path() + "/a\"b",
                                   "--listen", "127.0.0.1:1", "--health-listen", "none"});
  CHECK(refused.exit_code == 2);
  const auto lines = testing_support::ParseJsonLines(refused.output);
  REQUIRE_MESSAGE(lines.ok(), lines.status().ToString());
  REQUIRE(lines->size() == 1);
  CHECK(Contains(lines->front(), "\"level\": \"error\""));
  CHECK(Contains(lines->front(), "a\\\"b': contains the character"));
}
