// Many files through NFS from one process: libnfs's async API over a few
// connections at once, one call in flight on each (NFSv4.0 serializes the
// OPENs of one client: libnfs gives each context one open-owner, so a second
// OPEN in flight on it fails NFS4ERR_BAD_STATEID). Creating and stat'ing
// 100,000 files takes seconds, where one call at a time, or a process per
// file, takes minutes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct nfs_context;

namespace testing_support {

struct NfsLane;

// `files` files spread over directories of `per_dir`, under `root` (relative
// to the export): root/d<k>/f<i>.
struct FileTree {
  std::string root = "/tree";
  int files = 100'000;
  int per_dir = 1'000;

  int directories() const { return (files + per_dir - 1) / per_dir; }
  std::string Directory(int k) const;
  std::string File(int i) const;
};

class NfsBulk {
 public:
  // Mounts nfs://host:port<export_path> (NFSv4) `connections` times, each
  // as its own NFSv4 client; each call is bounded by `timeout`.
  static absl::StatusOr<std::unique_ptr<NfsBulk>> Connect(
      const std::string& host, uint16_t port, const std::string& export_path, int connections = 16,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000));
  ~NfsBulk();
  NfsBulk(const NfsBulk&) = delete;
  NfsBulk& operator=(const NfsBulk&) = delete;

  // The root, its directories, then every file (created empty and closed).
  // None may exist yet.
  absl::Status Create(const FileTree& tree);
  // A stat (LOOKUP + GETATTR) of every file.
  absl::Status Stat(const FileTree& tree);
  // Reads every directory; the entries read (files and "." / "..").
  absl::StatusOr<uint64_t> List(const FileTree& tree);

 private:
  NfsBulk() = default;
  static absl::Status Error(nfs_context* nfs, const std::string& what);
  // Issues `start(nfs, path, lane)` for every path, one per connection at a
  // time, and runs libnfs until all have answered or the first failure has
  // drained. `lane` (the connection's state) goes to the call's callbacks.
  absl::Status RunAll(const std::vector<std::string>& paths, const char* what,
                      int (*start)(nfs_context* nfs, const char* path, void* lane));

  std::vector<nfs_context*> connections_;
  // Each connection's call state, alive as long as the connections: libnfs
  // answers calls still in flight (cancelled) when a context is destroyed.
  std::vector<std::unique_ptr<NfsLane>> lanes_;
  std::string error_;  // the first failure of the running batch
};

}  // namespace testing_support
