// ganesha.conf for one NFSv4-only share. A GaneshaConfig can only be built
// from validated inputs, so rendering never interpolates unchecked text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sharemgr {

// Which callers' identities the export maps to the anonymous uid/gid.
enum class Squash { kNone, kRoot, kAll };

// What bounds ganesha's memory as the files touched and the clients grow. Each
// is written to ganesha.conf only when set: 0 leaves ganesha's own default.
struct GaneshaLimits {
  // MDCACHE Entries_HWMark: cached file handles and attributes (ganesha: 100000,
  // about 1.7 KiB each), reused beyond this.
  int64_t cache_entries = 0;
  // MDCACHE Chunks_HWMark: cached directory chunks (ganesha: 100000).
  int64_t dir_chunks = 0;
  // MDCACHE Dir_Chunk: the entries of one chunk, and so also how many names
  // looked up one by one a cached directory keeps (Detached_Mult, 1, times
  // this; ganesha: 128).
  int64_t dir_chunk_entries = 0;
  // NFSv4 Max_Client_Ids: NFSv4 client records (ganesha: unlimited).
  int64_t max_clients = 0;
  // NFS_CORE_PARAM RPC_Max_Connections: TCP connections (ganesha: 1024, at most 10000).
  int64_t max_connections = 0;
};

struct GaneshaConfigInput {
  std::string volume;
  std::string export_dir;
  std::string bind_address;
  int64_t nfs_port = 0;
  int64_t grace_seconds = 0;
  int64_t lease_seconds = 0;
  std::string recovery_root;
  std::string plugins_dir;
  // Who may use the export (addresses, CIDR networks, host names); empty:
  // every client. When set, `probe_client` (share-manager's own export
  // probe connects from there) is allowed metadata only (LOOKUP, GETATTR),
  // squashed: it may see the export, never read a file's data.
  std::vector<std::string> clients;
  std::string probe_client;
  // No_Root_Squash by default, as Longhorn's share-manager exports.
  Squash squash = Squash::kNone;
  int64_t anon_uid = 65534;
  int64_t anon_gid = 65534;
  GaneshaLimits limits;
};

class GaneshaConfig {
 public:
  static absl::StatusOr<GaneshaConfig> Create(GaneshaConfigInput input);

  // The whole file. Without the export, ganesha serves nothing: that is how
  // Unmount withdraws the share while ganesha and its recovery state live on.
  std::string Render(bool with_export) const;

  const GaneshaConfigInput& input() const { return input_; }
  // The NFSv4 pseudo path clients mount: "/" + volume.
  std::string pseudo_path() const { return "/" + input_.volume; }

 private:
  explicit GaneshaConfig(GaneshaConfigInput input) : input_(std::move(input)) {}
  GaneshaConfigInput input_;
};

}  // namespace sharemgr
