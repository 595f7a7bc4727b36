#include "server/router.h"

#include <algorithm>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "core/error.h"

namespace rowlm::server {

namespace {

// cpp-httplib's Stream over one buffered request and its connection: reads
// come from the request (nothing more is read from the socket: the framer
// already read the whole request), writes go to the client.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(Connection& connection, const std::string& request) : connection_(connection), request_(request) {}

  bool is_readable() const override { return read_ < request_.size(); }
  bool is_writable() const override { return !connection_.hung_up(); }
  ssize_t read(char* ptr, std::size_t size) override {
    const std::size_t n = std::min(size, request_.size() - read_);
    std::memcpy(ptr, request_.data() + read_, n);
    read_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, std::size_t size) override {
    return connection_.write_all(std::string_view(ptr, size)) ? ssize_t(size) : -1;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = connection_.peer_address();
    port = connection_.peer_port();
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = connection_.local_address();
    port = connection_.local_port();
  }
  // cpp-httplib reads this only to refuse descriptors select() cannot watch
  // (>= FD_SETSIZE); it never selects on this stream's socket, whose reads
  // come from memory, so no descriptor is the honest answer.
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  Connection& connection_;
  const std::string& request_;
  std::size_t read_ = 0;
};

}  // namespace

Router::Router() {
  // cpp-httplib writes a streamed (chunked) reply only while its listening
  // socket looks open, its test for shutting down. The front door owns the
  // real listening socket, so this server holds a descriptor of its own
  // there, open for as long as it lives.
  placeholder_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (placeholder_fd_ < 0) throw Error(std::string("cannot open /dev/null: ") + std::strerror(errno));
  svr_sock_ = placeholder_fd_;
}

Router::~Router() {
  svr_sock_ = INVALID_SOCKET;
  ::close(placeholder_fd_);
}

bool Router::serve(Connection& connection, const std::string& request, bool close_after,
                   const std::function<void(httplib::Request&)>& on_request) {
  ConnectionStream stream(connection, request);
  bool closed = false;
  const bool written = process_request(stream, close_after, closed, on_request);
  return written && !closed && !close_after && !connection.hung_up();
}

}  // namespace rowlm::server
