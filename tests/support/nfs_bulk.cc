#include "tests/support/nfs_bulk.h"

#include <fcntl.h>
#include <nfsc/libnfs-raw-nfs4.h>
#include <nfsc/libnfs.h>
#include <poll.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace testing_support {

std::string FileTree::Directory(int k) const { return absl::StrCat(root, "/d", k); }

std::string FileTree::File(int i) const { return absl::StrCat(Directory(i / per_dir), "/f", i); }

// One connection's part of a RunAll: its call in flight, and the batch's
// first failure (shared by every lane).
struct NfsLane {
  bool in_flight = false;
  std::string* error = nullptr;  // no more calls are started after one

  void Done(int err, void* data, const char* what) {
    in_flight = false;
    if (err < 0 && error->empty()) {
      *error =
          absl::StrCat(what, ": ", data != nullptr ? static_cast<const char*>(data) : "failed");
    }
  }
};

namespace {

using Lane = NfsLane;

void OnClosed(int err, nfs_context*, void* data, void* lane) {
  static_cast<Lane*>(lane)->Done(err, data, "close");
}

// A file created: closed next, still the lane's call in flight.
void OnCreated(int err, nfs_context* nfs, void* data, void* lane) {
  if (err < 0) return static_cast<Lane*>(lane)->Done(err, data, "create");
  if (nfs_close_async(nfs, static_cast<nfsfh*>(data), OnClosed, lane) != 0) {
    static_cast<Lane*>(lane)->Done(-1, const_cast<char*>(nfs_get_error(nfs)), "close");
  }
}

int StartCreate(nfs_context* nfs, const char* path, void* lane) {
  return nfs_creat_async(nfs, path, 0644, OnCreated, lane);
}

void OnStat(int err, nfs_context*, void* data, void* lane) {
  static_cast<Lane*>(lane)->Done(err, data, "stat");
}

int StartStat(nfs_context* nfs, const char* path, void* lane) {
  return nfs_stat64_async(nfs, path, OnStat, lane);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NfsBulk>> NfsBulk::Connect(const std::string& host, uint16_t port,
                                                          const std::string& export_path,
                                                          int connections,
                                                          std::chrono::milliseconds timeout) {
  std::unique_ptr<NfsBulk> bulk(new NfsBulk());
  const std::string url = absl::StrCat("nfs://", host, export_path, "?version=4&nfsport=", port);
  for (int k = 0; k < connections; ++k) {
    nfs_context* nfs = nfs_init_context();
    if (nfs == nullptr) return absl::InternalError("nfs_init_context failed");
    bulk->connections_.push_back(nfs);
    bulk->lanes_.push_back(std::make_unique<NfsLane>(NfsLane{.error = &bulk->error_}));
    nfs_set_timeout(nfs, static_cast<int>(timeout.count()));
    // One NFSv4 client each: the same name would make each the others' reboot.
    nfs4_set_client_name(nfs, absl::StrCat("share-manager-test ", getpid(), " ", k).c_str());
    nfs_url* parsed = nfs_parse_url_dir(nfs, url.c_str());
    if (parsed == nullptr) return Error(nfs, absl::StrCat("parse ", url));
    nfs_set_version(nfs, NFS_V4);
    const int rc = nfs_mount(nfs, parsed->server, parsed->path);
    nfs_destroy_url(parsed);
    if (rc != 0) return Error(nfs, absl::StrCat("mount ", url));
  }
  return bulk;
}

NfsBulk::~NfsBulk() {
  for (nfs_context* nfs : connections_) nfs_destroy_context(nfs);
}

absl::Status NfsBulk::Error(nfs_context* nfs, const std::string& what) {
  const char* err = nfs_get_error(nfs);
  return absl::UnavailableError(absl::StrCat(what, ": ", err ? err : "unknown error"));
}

absl::Status NfsBulk::RunAll(const std::vector<std::string>& paths, const char* what,
                             int (*start)(nfs_context* nfs, const char* path, void* lane)) {
  std::string& error = error_;
  error.clear();
  std::vector<pollfd> fds(connections_.size());
  size_t next = 0;
  for (;;) {
    bool busy = false;
    for (size_t k = 0; k < lanes_.size(); ++k) {
      Lane& lane = *lanes_[k];
      if (!lane.in_flight && next < paths.size() && error.empty()) {
        lane.in_flight = true;
        if (start(connections_[k], paths[next].c_str(), &lane) != 0) {
          lane.in_flight = false;
          error = absl::StrCat(what, " ", paths[next], ": ", nfs_get_error(connections_[k]));
        }
        ++next;
      }
      busy = busy || lane.in_flight;
      fds[k] = {nfs_get_fd(connections_[k]), static_cast<short>(nfs_which_events(connections_[k])),
                0};
    }
    if (!busy) break;
    // libnfs times its calls out in nfs_service, also when nothing arrives.
    if (poll(fds.data(), fds.size(), 100) < 0) return absl::InternalError("poll failed");
    for (size_t k = 0; k < lanes_.size(); ++k) {
      if (nfs_service(connections_[k], fds[k].revents) < 0) {
        return Error(connections_[k], absl::StrCat(what, ": the connection failed"));
      }
    }
  }
  if (!error.empty()) return absl::UnavailableError(error);
  return absl::OkStatus();
}

absl::Status NfsBulk::Create(const FileTree& tree) {
  nfs_context* nfs = connections_.front();
  if (nfs_mkdir(nfs, tree.root.c_str()) != 0) return Error(nfs, absl::StrCat("mkdir ", tree.root));
  for (int k = 0; k < tree.directories(); ++k) {
    const std::string dir = tree.Directory(k);
    if (nfs_mkdir(nfs, dir.c_str()) != 0) return Error(nfs, absl::StrCat("mkdir ", dir));
  }
  std::vector<std::string> paths;
  paths.reserve(static_cast<size_t>(tree.files));
  for (int i = 0; i < tree.files; ++i) paths.push_back(tree.File(i));
  return RunAll(paths, "create", StartCreate);
}

absl::Status NfsBulk::Stat(const FileTree& tree) {
  std::vector<std::string> paths;
  paths.reserve(static_cast<size_t>(tree.files));
  for (int i = 0; i < tree.files; ++i) paths.push_back(tree.File(i));
  return RunAll(paths, "stat", StartStat);
}

absl::StatusOr<uint64_t> NfsBulk::List(const FileTree& tree) {
  nfs_context* nfs = connections_.front();
  uint64_t entries = 0;
  for (int k = 0; k < tree.directories(); ++k) {
    const std::string dir = tree.Directory(k);
    nfsdir* handle = nullptr;
    if (nfs_opendir(nfs, dir.c_str(), &handle) != 0) {
      return Error(nfs, absl::StrCat("opendir ", dir));
    }
    while (nfs_readdir(nfs, handle) != nullptr) ++entries;
    nfs_closedir(nfs, handle);
  }
  return entries;
}

}  // namespace testing_support
