// A real NFSv4 client for tests and benchmarks (libnfs; the kernel here has
// no NFS client). Works around libnfs 4.0's NFSv4 limits: writes go out in
// chunks of at most 3900 bytes, reads in chunks of at most 1 MiB, and an
// existing file is unlinked before it is created again.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct nfs_context;

namespace testing_support {

class NfsClient {
 public:
  // Mounts nfs://host:port<export_path> (NFSv4); every call is bounded by `timeout`.
  static absl::StatusOr<std::unique_ptr<NfsClient>> Connect(
      const std::string& host, uint16_t port, const std::string& export_path,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));
  ~NfsClient();
  NfsClient(const NfsClient&) = delete;
  NfsClient& operator=(const NfsClient&) = delete;

  // `path` is relative to the export, e.g. "/file.txt".
  absl::Status WriteFile(const std::string& path, const std::string& data);
  absl::StatusOr<std::string> ReadFile(const std::string& path);

 private:
  explicit NfsClient(nfs_context* nfs) : nfs_(nfs) {}
  absl::Status Error(const std::string& what) const;
  nfs_context* nfs_;
};

// One-shot helpers: a fresh connection per call (a libnfs context never
// recovers after its server dies).
absl::Status WriteOnce(const std::string& host, uint16_t port, const std::string& export_path,
                       const std::string& path, const std::string& data,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));
absl::StatusOr<std::string> ReadOnce(
    const std::string& host, uint16_t port, const std::string& export_path, const std::string& path,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

}  // namespace testing_support
