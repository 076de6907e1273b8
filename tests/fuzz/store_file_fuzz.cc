// The controller's store file (MemoryStore::OpenFile: one JSON ShareRecord a
// line), as a crash, a full disk or a hand edit may leave it. A file that
// loads must hold records that encode and decode back to themselves, one per
// name. Input: the file.
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <sys/mman.h>
#include <unistd.h>

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"
#include "controller/store/memory_store.h"
#include "tests/fuzz/fuzz_input.h"

using fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A memfd: a regular file no run leaves behind.
  base::UniqueFd fd(memfd_create("store", MFD_CLOEXEC));
  Check(static_cast<bool>(fd), "memfd_create");
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd.get(), data + done, size - done);
    Check(n > 0, "write to the memfd");
    done += static_cast<size_t>(n);
  }
  auto store = controller::MemoryStore::OpenFile(absl::StrCat("/proc/self/fd/", fd.get()));
  if (!store.ok()) {
    Check(!store.status().message().empty(), "a refused store file says why");
    return 0;
  }
  auto records = (*store)->List();
  Check(records.ok(), "a loaded store lists");
  std::set<std::string> names;
  for (const auto& record : *records) {
    Check(names.insert(record.name()).second, "one record per name", record.name());
    std::string json;
    Check(google::protobuf::util::MessageToJsonString(record, &json).ok(), "a record encodes");
    sharemanager::controller::v1::ShareRecord again;
    Check(google::protobuf::util::JsonStringToMessage(json, &again).ok(), "a record decodes", json);
    Check(google::protobuf::util::MessageDifferencer::Equals(record, again),
          "a record reads back as itself", json);
  }
  return 0;
}
