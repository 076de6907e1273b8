#include "tests/support/nfs_client.h"

#include <fcntl.h>
#include <nfsc/libnfs-raw-nfs4.h>
#include <nfsc/libnfs.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace testing_support {
namespace {

constexpr size_t kMaxWriteChunk = 3900;
constexpr size_t kMaxReadChunk = 1 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<NfsClient>> NfsClient::Connect(const std::string& host,
                                                              uint16_t port,
                                                              const std::string& export_path,
                                                              std::chrono::milliseconds timeout) {
  nfs_context* nfs = nfs_init_context();
  if (nfs == nullptr) return absl::InternalError("nfs_init_context failed");
  std::unique_ptr<NfsClient> client(new NfsClient(nfs));
  nfs_set_timeout(nfs, static_cast<int>(timeout.count()));
  const std::string url = absl::StrCat("nfs://", host, export_path, "?version=4&nfsport=", port);
  nfs_url* parsed = nfs_parse_url_dir(nfs, url.c_str());
  if (parsed == nullptr) return client->Error(absl::StrCat("parse ", url));
  nfs_set_version(nfs, NFS_V4);
  const int rc = nfs_mount(nfs, parsed->server, parsed->path);
  nfs_destroy_url(parsed);
  if (rc != 0) return client->Error(absl::StrCat("mount ", url));
  return client;
}

NfsClient::~NfsClient() { nfs_destroy_context(nfs_); }

absl::Status NfsClient::Error(const std::string& what) const {
  const char* err = nfs_get_error(nfs_);
  return absl::UnavailableError(absl::StrCat(what, ": ", err ? err : "unknown error"));
}

absl::Status NfsClient::WriteFile(const std::string& path, const std::string& data) {
  nfs_unlink(nfs_, path.c_str());  // create over an existing file fails in libnfs 4.0
  nfsfh* fh = nullptr;
  if (nfs_open2(nfs_, path.c_str(), O_CREAT | O_WRONLY, 0644, &fh) != 0) {
    return Error(absl::StrCat("create ", path));
  }
  size_t done = 0;
  absl::Status status;
  while (done < data.size()) {
    const size_t chunk = std::min(kMaxWriteChunk, data.size() - done);
    const int n = nfs_write(nfs_, fh, chunk, data.data() + done);
    if (n <= 0) {
      status = Error(absl::StrCat("write ", path));
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (nfs_close(nfs_, fh) != 0 && status.ok()) status = Error(absl::StrCat("close ", path));
  return status;
}

absl::StatusOr<std::string> NfsClient::ReadFile(const std::string& path) {
  nfsfh* fh = nullptr;
  if (nfs_open(nfs_, path.c_str(), O_RDONLY, &fh) != 0) return Error(absl::StrCat("open ", path));
  std::string out;
  std::string buf(kMaxReadChunk, '\0');
  for (;;) {
    const int n = nfs_read(nfs_, fh, buf.size(), buf.data());
    if (n < 0) {
      nfs_close(nfs_, fh);
      return Error(absl::StrCat("read ", path));
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  nfs_close(nfs_, fh);
  return out;
}

absl::Status WriteOnce(const std::string& host, uint16_t port, const std::string& export_path,
                       const std::string& path, const std::string& data,
                       std::chrono::milliseconds timeout) {
  auto client = NfsClient::Connect(host, port, export_path, timeout);
  if (!client.ok()) return client.status();
  return (*client)->WriteFile(path, data);
}

absl::StatusOr<std::string> ReadOnce(const std::string& host, uint16_t port,
                                     const std::string& export_path, const std::string& path,
                                     std::chrono::milliseconds timeout) {
  auto client = NfsClient::Connect(host, port, export_path, timeout);
  if (!client.ok()) return client.status();
  return (*client)->ReadFile(path);
}

}  // namespace testing_support
