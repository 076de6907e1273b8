// The ONC RPC replies the NFS probes read from the network (ganesha, or
// whatever answers on its port): a record mark, then a reply record parsed by
// ParseNullReply and ParseCompoundStatus. Input: the xid our call carried (4
// bytes, big-endian), then the bytes the server sent.
#include <span>
#include <string>

#include "supervisor/nfs_null_probe.h"
#include "tests/fuzz/fuzz_input.h"

using fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const std::span<const uint8_t> input(data, size);
  const uint32_t xid = (uint32_t{data[0]} << 24) | (uint32_t{data[1]} << 16) |
                       (uint32_t{data[2]} << 8) | uint32_t{data[3]};

  // Our own calls are well-formed records whatever the xid and component.
  const std::string component(fuzz::Text(data + 4, size - 4).substr(0, 300));
  for (const auto& call :
       {supervisor::EncodeNullCall(xid), supervisor::EncodeLookupCall(xid, component)}) {
    Check(call.size() >= 4 && call.size() % 4 == 0, "a call is whole XDR words");
    auto len = supervisor::ParseRecordMark(std::span<const uint8_t, 4>(call.data(), 4));
    Check(len.ok() && *len == call.size() - 4 && (call[0] & 0x80) != 0,
          "a call's record mark is the last fragment with the record's length");
  }

  const auto stream = input.subspan(4);
  if (stream.size() < 4) return 0;
  auto len = supervisor::ParseRecordMark(stream.first<4>());
  if (!len.ok()) return 0;
  Check(*len <= 1024, "a record mark over the reply limit is refused");
  // The probe reads exactly the announced length, or fails waiting for it.
  if (stream.size() - 4 < *len) return 0;
  const auto record = stream.subspan(4, *len);

  const absl::Status null = supervisor::ParseNullReply(record, xid);
  const absl::StatusOr<uint32_t> compound = supervisor::ParseCompoundStatus(record, xid);
  if (null.ok()) {
    // xid, REPLY, MSG_ACCEPTED, verifier (flavor, length), SUCCESS.
    Check(record.size() >= 24, "an accepted reply has its whole header");
    Check(record[0] == data[0] && record[1] == data[1] && record[2] == data[2] &&
              record[3] == data[3],
          "an accepted reply carries our xid");
    Check(compound.ok() || (absl::IsDataLoss(compound.status()) &&
                            compound.status().message() == "truncated COMPOUND reply"),
          "after a good header only a missing COMPOUND status is wrong",
          compound.status().ToString());
  } else {
    Check(!null.message().empty(), "a refused reply says why");
    Check(!compound.ok() && compound.status() == null, "a bad header fails both parsers alike",
          compound.status().ToString());
  }
  return 0;
}
