#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"

namespace base {
namespace {

absl::Status Errno(const char* what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

std::string DirectoryOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::Status EnsureDirectory(const std::string& path, unsigned mode, ExistingMode existing) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Errno("cannot stat", path);
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", ec.message()));
    // create_directories applies the umask; a new directory gets exactly `mode`.
    if (chmod(path.c_str(), mode) != 0) return Errno("cannot chmod", path);
    return absl::OkStatus();
  }
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(path + " is not a directory");
  if (existing == ExistingMode::kEnforce && (st.st_mode & 07777) != mode &&
      chmod(path.c_str(), mode) != 0) {
    return Errno("cannot chmod", path);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content, unsigned mode,
                                 Durability durability) {
  // A unique temp name: two writers (or a crash's leftover) never share one.
  std::string tmp = path + ".XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  UniqueFd fd(mkostemp(name.data(), O_CLOEXEC));
  if (!fd) return Errno("cannot create a temp file beside", path);
  tmp.assign(name.data());
  auto fail = [&tmp](absl::Status status) {
    unlink(tmp.c_str());
    return status;
  };
  if (fchmod(fd.get(), mode) != 0) return fail(Errno("cannot chmod", tmp));
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = write(fd.get(), content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(Errno("cannot write", tmp));
    }
    written += static_cast<size_t>(n);
  }
  const bool durable = durability == Durability::kFsync;
  if (durable && fsync(fd.get()) != 0) return fail(Errno("cannot fsync", tmp));
  fd.reset();
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail(Errno("cannot rename to", path));
  if (!durable) return absl::OkStatus();
  const std::string dir = DirectoryOf(path);
  UniqueFd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd || fsync(dir_fd.get()) != 0) return Errno("cannot fsync directory", dir);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return Errno("cannot open", path);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Errno("cannot stat", path);
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(path + " is not a regular file");
  std::string content;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n == 0) return content;
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot read", path);
    }
    content.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace base
