#pragma once
// One accepted client socket, shared by the front door's event loop (which
// owns the descriptor, reads requests and closes it) and the handler thread
// that serves a request on it (which writes the reply).
//
// The hang-up watch is how work ends with its client: while a request is
// served, the event loop watches the socket for the client hanging up and
// calls the handler's callback at once, whether the reply is streamed,
// waiting in the engine's queue or being computed whole.
//
// Thread-safe: write_all() and the watch may be used from the serving thread
// while the event loop reports a hang-up.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace rowlm::server {

class Connection {
 public:
  Connection(int fd, std::string peer_address, int peer_port, std::string local_address, int local_port,
             std::chrono::milliseconds write_timeout);
  ~Connection();  // closes the descriptor
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return fd_; }
  const std::string& peer_address() const { return peer_address_; }
  int peer_port() const { return peer_port_; }
  const std::string& local_address() const { return local_address_; }
  int local_port() const { return local_port_; }

  // Writes every byte, waiting for the socket up to the write timeout at a
  // time; false once the client has gone, on an error, or on the timeout.
  bool write_all(std::string_view bytes);

  // The client hung up (closed or reset the connection, or shut its sending
  // side) while a request was served.
  bool hung_up() const;
  // The event loop's report of a hang-up: calls the registered callback, if
  // any, on the event loop's thread.
  void report_hang_up();

  // Calls `on_hang_up` once if the client hangs up while the watch lives
  // (at once, on this thread, if it already has). The callback must be quick
  // and must not throw (it cancels engine requests); what it uses it should
  // own (it may run on the event loop's thread as the watch is destroyed).
  class Watch {
   public:
    Watch(std::shared_ptr<Connection> connection, std::function<void()> on_hang_up);
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

   private:
    std::shared_ptr<Connection> connection_;
  };

 private:
  const int fd_;
  const std::string peer_address_;
  const int peer_port_;
  const std::string local_address_;
  const int local_port_;
  const std::chrono::milliseconds write_timeout_;

  mutable std::mutex mutex_;
  bool hung_up_ = false;
  std::function<void()> on_hang_up_;
};

}  // namespace rowlm::server
