#include "server/connection.h"

#include <cerrno>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace rowlm::server {

Connection::Connection(int fd, std::string peer_address, int peer_port, std::string local_address, int local_port,
                       std::chrono::milliseconds write_timeout)
    : fd_(fd),
      peer_address_(std::move(peer_address)),
      peer_port_(peer_port),
      local_address_(std::move(local_address)),
      local_port_(local_port),
      write_timeout_(write_timeout) {}

Connection::~Connection() { ::close(fd_); }

bool Connection::write_all(std::string_view bytes) {
  while (!bytes.empty()) {
    if (hung_up()) return false;
    // The socket is non-blocking (the event loop reads it); MSG_NOSIGNAL: a
    // client that has gone makes the write fail, not the process die.
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(std::size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const int ready = ::poll(&p, 1, int(write_timeout_.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
      continue;
    }
    return false;
  }
  return true;
}

bool Connection::hung_up() const {
  std::lock_guard lock(mutex_);
  return hung_up_;
}

void Connection::report_hang_up() {
  std::function<void()> callback;
  {
    std::lock_guard lock(mutex_);
    if (hung_up_) return;
    hung_up_ = true;
    callback = std::move(on_hang_up_);
    on_hang_up_ = nullptr;
  }
  if (callback) callback();
}

Connection::Watch::Watch(std::shared_ptr<Connection> connection, std::function<void()> on_hang_up)
    : connection_(std::move(connection)) {
  {
    std::lock_guard lock(connection_->mutex_);
    if (!connection_->hung_up_) {
      connection_->on_hang_up_ = std::move(on_hang_up);
      return;
    }
  }
  if (on_hang_up) on_hang_up();
}

Connection::Watch::~Watch() {
  std::lock_guard lock(connection_->mutex_);
  connection_->on_hang_up_ = nullptr;
}

}  // namespace rowlm::server
