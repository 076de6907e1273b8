#include "tests/kube/fake_apiserver.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace testing_support {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went: nothing more to say
    done += static_cast<size_t>(n);
  }
}

}  // namespace

FakeApiserver::FakeApiserver(Reply reply) : reply_(std::move(reply)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listen_fd_ >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(listen(listen_fd_, 16) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  port_ = ntohs(address.sin_port);
  REQUIRE(pipe2(stop_pipe_, O_CLOEXEC) == 0);
  thread_ = std::thread([this] { Serve(); });
}

FakeApiserver::~FakeApiserver() {
  (void)!write(stop_pipe_[1], "x", 1);
  thread_.join();
  close(listen_fd_);
  close(stop_pipe_[0]);
  close(stop_pipe_[1]);
}

std::string FakeApiserver::url() const { return absl::StrCat("http://127.0.0.1:", port_); }

std::vector<std::string> FakeApiserver::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

std::vector<std::chrono::steady_clock::time_point> FakeApiserver::times() const {
  absl::MutexLock lock(&mu_);
  return times_;
}

int FakeApiserver::clients_gone() const {
  absl::MutexLock lock(&mu_);
  return clients_gone_;
}

void FakeApiserver::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    close(fd);
  }
}

void FakeApiserver::Answer(int fd) {
  // The request's head (bodies are not looked at; they are small enough to
  // sit in the socket's buffer).
  std::string head;
  char buffer[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    head.append(buffer, static_cast<size_t>(n));
  }
  const std::vector<std::string> words =
      absl::StrSplit(head.substr(0, head.find("\r\n")), absl::MaxSplits(' ', 2));
  const std::string request = words.size() >= 2 ? absl::StrCat(words[0], " ", words[1]) : head;
  {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
    times_.push_back(std::chrono::steady_clock::now());
  }
  const FakeReply reply = reply_(request);
  WriteAll(fd, absl::StrCat("HTTP/1.1 ", reply.status,
                            " Fake\r\nContent-Type: application/json\r\n"
                            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"));
  for (const std::string& chunk : reply.chunks) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
    WriteAll(fd, absl::StrCat(size, chunk, "\r\n"));
    // Apart, so that the client reads them apart.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (reply.cut) return;
  if (reply.hold) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    while (poll(fds, 2, -1) >= 0) {
      if (fds[1].revents != 0) return;
      if (fds[0].revents != 0 && recv(fd, buffer, sizeof(buffer), 0) <= 0) {
        absl::MutexLock lock(&mu_);
        ++clients_gone_;
        return;
      }
    }
    return;
  }
  WriteAll(fd, "0\r\n\r\n");
}

}  // namespace testing_support
