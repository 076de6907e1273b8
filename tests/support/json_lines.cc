#include "tests/support/json_lines.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "supervisor/run_program.h"

namespace testing_support {
namespace {

constexpr char kCheck[] = R"(
import json, re, sys
TIME = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z')
LEVELS = {'trace', 'debug', 'info', 'warning', 'error', 'critical'}
with open(sys.argv[1], 'rb') as f:
    raw = f.read()
for n, line in enumerate(raw.decode('utf-8').split('\n')[:-1], 1):
    try:
        obj = json.loads(line, parse_constant=lambda c: 1 / 0)
        assert isinstance(obj, dict), 'not an object'
        assert TIME.match(obj['time']), 'time ' + obj['time']
        assert obj['level'] in LEVELS, 'level ' + obj['level']
        assert isinstance(obj['component'], str), 'component'
        assert isinstance(obj['message'], str), 'message'
    except Exception as e:
        sys.exit('line %d: %r: %s' % (n, line, e))
    print(json.dumps(obj, sort_keys=True, ensure_ascii=True))
if raw and not raw.endswith(b'\n'):
    sys.exit('the output does not end with a newline')
)";

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseJsonLines(const std::string& text) {
  char path[] = "/tmp/sharemgr-json-lines.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return absl::InternalError("mkstemp failed");
  close(fd);
  std::ofstream(path, std::ios::binary) << text;
  const auto result =
      supervisor::RunProgram({"python3", "-c", kCheck, path}, std::chrono::milliseconds(30'000));
  unlink(path);
  if (result.exit_code != 0) return absl::InvalidArgumentError(result.output);
  return std::vector<std::string>(absl::StrSplit(result.output, '\n', absl::SkipEmpty()));
}

}  // namespace testing_support
