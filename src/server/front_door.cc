#include "server/front_door.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"

namespace rowlm::server {

namespace {

using Clock = std::chrono::steady_clock;

// How long a refused connection is read and discarded after its reply, so
// that closing it with unread bytes does not reset it before the client
// reads the reply (nginx's lingering close).
constexpr auto kLinger = std::chrono::milliseconds(1000);
// How often deadlines are checked.
constexpr auto kTick = std::chrono::milliseconds(50);

// A descriptor closed when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
  }
  return "Error";
}

void address_of(const sockaddr_storage& ss, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
    port = ntohs(a.sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    ::inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
    port = ntohs(a.sin6_port);
  }
  ip = buf;
}

}  // namespace

struct FrontDoor::Impl {
  enum class Phase { kReading, kServing, kLingering };

  // The loop's record of one connection (touched on the loop's thread only).
  struct Entry {
    std::shared_ptr<Connection> connection;
    RequestFramer framer;
    Phase phase = Phase::kReading;
    bool fresh = true;         // no request served on it yet
    bool counted = true;       // counts against its client's limit
    Clock::time_point deadline;
    std::string pending;       // bytes received after the request being served
  };

  struct Job {
    std::shared_ptr<Connection> connection;
    std::string request;
  };

  Impl(FrontDoorOptions o, Serve s, Refuse r) : options(std::move(o)), serve(std::move(s)), refuse(std::move(r)) {}

  void loop();
  void accept_all();
  void on_event(int fd);
  void read_request(Entry& entry);
  void advance(Entry& entry);
  void start_reading(Entry& entry, Clock::time_point now);
  void dispatch(Entry& entry);
  void send_refusal(Entry& entry, Refusal refusal);
  void close_entry(int fd);
  void take_handed_back();
  void check_deadlines();
  void set_events(int fd, std::uint32_t events);
  void handler_thread();
  void wake();

  FrontDoorOptions options;
  Serve serve;
  Refuse refuse;

  Fd listener, epoll, wakeup;
  std::atomic<bool> stopping{false};
  bool listener_closed = false;
  Clock::time_point accept_resume{};  // after EMFILE, accepting pauses briefly

  std::unordered_map<int, std::unique_ptr<Entry>> entries;
  std::unordered_map<std::string, int> per_client;

  // Whole requests waiting for a handler.
  std::mutex jobs_mutex;
  std::condition_variable jobs_ready;
  std::deque<Job> jobs;
  bool handlers_stop = false;
  std::vector<std::jthread> handlers;

  // Connections handlers are done with: (descriptor, may carry another request).
  std::mutex back_mutex;
  std::vector<std::pair<int, bool>> handed_back;
};

FrontDoor::FrontDoor(FrontDoorOptions options, Serve serve, Refuse refuse)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(serve), std::move(refuse))) {
  const FrontDoorOptions& o = impl_->options;
  if (o.handler_threads < 1) throw Error("--http-threads must be at least 1");
  if (o.max_connections < 1) throw Error("--max-connections must be at least 1");
  if (o.max_connections_per_client < 1) throw Error("--max-connections-per-client must be at least 1");
  impl_->epoll = Fd(::epoll_create1(EPOLL_CLOEXEC));
  impl_->wakeup = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (impl_->epoll.get() < 0 || impl_->wakeup.get() < 0)
    throw Error(std::string("cannot create the server's event loop: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = impl_->wakeup.get();
  ::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_ADD, impl_->wakeup.get(), &ev);
}

FrontDoor::~FrontDoor() {
  {
    std::lock_guard lock(impl_->jobs_mutex);
    impl_->handlers_stop = true;
  }
  impl_->jobs_ready.notify_all();
  impl_->handlers.clear();  // joins
}

int FrontDoor::bind() {
  Impl& d = *impl_;
  const std::string where = d.options.host + ":" + std::to_string(d.options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(d.options.port);
  if (const int rc = ::getaddrinfo(d.options.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    throw Error("cannot listen on " + where + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), d.options.backlog) != 0) {
      why = std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    std::string ip;
    int bound_port = 0;
    address_of(ss, ip, bound_port);
    d.listener = std::move(fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = d.listener.get();
    ::epoll_ctl(d.epoll.get(), EPOLL_CTL_ADD, d.listener.get(), &ev);
    return bound_port;
  }
  throw Error("cannot listen on " + where + ": " + why);
}

void FrontDoor::run() {
  Impl& d = *impl_;
  ROWLM_CHECK(d.listener.get() >= 0 || d.stopping, "FrontDoor::run() before bind()");
  {
    std::lock_guard lock(d.jobs_mutex);
    d.handlers_stop = false;
  }
  d.handlers.reserve(std::size_t(d.options.handler_threads));
  for (int i = 0; i < d.options.handler_threads; ++i) d.handlers.emplace_back([&d] { d.handler_thread(); });
  d.loop();
  {
    std::lock_guard lock(d.jobs_mutex);
    d.handlers_stop = true;
  }
  d.jobs_ready.notify_all();
  d.handlers.clear();  // joins
}

void FrontDoor::stop() {
  impl_->stopping = true;
  impl_->wake();
}

void FrontDoor::Impl::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wakeup.get(), &one, sizeof one);
}

void FrontDoor::Impl::handler_thread() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(jobs_mutex);
      jobs_ready.wait(lock, [&] { return handlers_stop || !jobs.empty(); });
      if (jobs.empty()) return;
      job = std::move(jobs.front());
      jobs.pop_front();
    }
    bool keep = false;
    try {
      keep = serve(job.connection, job.request);
    } catch (...) {
      keep = false;
    }
    const int fd = job.connection->fd();
    job.connection.reset();  // the loop may close it now
    {
      std::lock_guard lock(back_mutex);
      handed_back.emplace_back(fd, keep);
    }
    wake();
  }
}

void FrontDoor::Impl::set_events(int fd, std::uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, fd, &ev);
}

void FrontDoor::Impl::loop() {
  std::vector<epoll_event> events(256);
  auto next_tick = Clock::now() + kTick;
  while (true) {
    if (stopping && !listener_closed) {
      listener_closed = true;
      if (listener.get() >= 0) ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, listener.get(), nullptr);
      listener.reset();
      std::vector<int> idle;
      for (const auto& [fd, e] : entries)
        if (e->phase != Phase::kServing) idle.push_back(fd);
      for (int fd : idle) close_entry(fd);
    }
    if (listener_closed && entries.empty()) return;
    const int timeout = int(std::max<long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now()).count()));
    const int n = ::epoll_wait(epoll.get(), events.data(), int(events.size()), timeout);
    for (int i = 0; i < n; ++i) {
      const int fd = events[std::size_t(i)].data.fd;
      if (fd == wakeup.get()) {
        std::uint64_t count;
        [[maybe_unused]] const ssize_t r = ::read(wakeup.get(), &count, sizeof count);
      } else if (fd == listener.get() && !listener_closed) {
        accept_all();
      } else {
        on_event(fd);
      }
    }
    take_handed_back();
    const auto now = Clock::now();
    if (now >= next_tick) {
      next_tick = now + kTick;
      check_deadlines();
      if (accept_resume != Clock::time_point{} && now >= accept_resume && !listener_closed) {
        accept_resume = {};
        set_events(listener.get(), EPOLLIN);
      }
    }
  }
}

void FrontDoor::Impl::accept_all() {
  for (int burst = 0; burst < 256; ++burst) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const int raw = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (raw < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop watching the listener for a tick rather
        // than spin on it; the backlog holds the clients meanwhile.
        set_events(listener.get(), 0);
        accept_resume = Clock::now() + kTick;
      }
      return;
    }
    Fd fd(raw);
    if (int(entries.size()) >= options.max_connections) continue;  // closes: no room even for a reply
    const int one = 1;
    // One small write per streamed token must not wait for Nagle.
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string peer_ip, local_ip;
    int peer_port = 0, local_port = 0;
    address_of(peer, peer_ip, peer_port);
    sockaddr_storage local{};
    socklen_t local_len = sizeof local;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len);
    address_of(local, local_ip, local_port);

    const int sock = fd.get();
    auto entry = std::make_unique<Entry>(Entry{
        std::make_shared<Connection>(raw, peer_ip, peer_port, local_ip, local_port, options.write_timeout),
        RequestFramer(options.limits)});
    fd.release();  // the Connection owns it now
    entry->deadline = Clock::now() + options.header_timeout;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = sock;
    ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, sock, &ev);
    Entry& e = *entry;
    entries.emplace(sock, std::move(entry));
    int& count = per_client[peer_ip];
    if (count >= options.max_connections_per_client) {
      e.counted = false;
      send_refusal(e, Refusal{429,
                              "too many connections from " + peer_ip + " (the limit is " +
                                  std::to_string(options.max_connections_per_client) + ")",
                              "", false});
      continue;
    }
    ++count;
  }
}

void FrontDoor::Impl::on_event(int fd) {
  const auto it = entries.find(fd);
  if (it == entries.end()) return;
  Entry& e = *it->second;
  switch (e.phase) {
    case Phase::kServing:
      // Watched for the client hanging up only (EPOLLRDHUP; errors and
      // hang-ups are always reported). No longer watched after: the
      // condition stays and would be reported again and again.
      ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
      e.connection->report_hang_up();
      return;
    case Phase::kLingering: {
      char buf[16384];
      while (true) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        close_entry(fd);
        return;
      }
    }
    case Phase::kReading:
      read_request(e);
      return;
  }
}

void FrontDoor::Impl::read_request(Entry& e) {
  const int fd = e.connection->fd();
  char buf[16384];
  // A bounded amount per wake-up, so one fast sender cannot starve the rest.
  for (int round = 0; round < 16 && e.phase == Phase::kReading; ++round) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // the client closed (or reset) the connection
      close_entry(fd);
      return;
    }
    const bool was_started = e.framer.started(), had_head = e.framer.head_complete();
    e.framer.feed(std::string_view(buf, std::size_t(n)));
    const auto now = Clock::now();
    if (!was_started && e.framer.started() && !e.fresh) e.deadline = now + options.header_timeout;
    if (!had_head && e.framer.head_complete()) e.deadline = now + options.body_timeout;
    advance(e);
  }
}

// Acts on the framer's state after it took bytes.
void FrontDoor::Impl::advance(Entry& e) {
  if (e.framer.take_continue()) e.connection->write_all("HTTP/1.1 100 Continue\r\n\r\n");
  switch (e.framer.state()) {
    case RequestFramer::State::kNeedMore: return;
    case RequestFramer::State::kRefused:
      send_refusal(e, Refusal{e.framer.status(), e.framer.message(), e.framer.path(), e.framer.has_anthropic_version()});
      return;
    case RequestFramer::State::kComplete: dispatch(e); return;
  }
}

void FrontDoor::Impl::dispatch(Entry& e) {
  {
    std::lock_guard lock(jobs_mutex);
    // Every handler busy and as many requests again waiting: refuse rather
    // than hold ever more whole requests in memory.
    if (jobs.size() < std::size_t(options.handler_threads)) {
      e.pending = e.framer.take_leftover();
      jobs.push_back(Job{e.connection, e.framer.request()});
      e.phase = Phase::kServing;
    }
  }
  if (e.phase != Phase::kServing) {
    send_refusal(e, Refusal{503, "the server is overloaded: every handler is busy; retry later", e.framer.path(),
                            e.framer.has_anthropic_version()});
    return;
  }
  jobs_ready.notify_one();
  set_events(e.connection->fd(), EPOLLRDHUP);
}

void FrontDoor::Impl::start_reading(Entry& e, Clock::time_point now) {
  e.phase = Phase::kReading;
  e.fresh = false;
  e.framer = RequestFramer(options.limits);
  e.deadline = now + options.keep_alive_timeout;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = e.connection->fd();
  // The loop stopped watching a connection whose client hung up; otherwise
  // it still watches it (for EPOLLRDHUP).
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, e.connection->fd(), &ev) != 0)
    ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, e.connection->fd(), &ev);
  if (!e.pending.empty()) {  // a pipelined request
    e.framer.feed(std::exchange(e.pending, {}));
    if (e.framer.head_complete()) e.deadline = now + options.body_timeout;
    else e.deadline = now + options.header_timeout;
    advance(e);
  }
}

void FrontDoor::Impl::take_handed_back() {
  std::vector<std::pair<int, bool>> back;
  {
    std::lock_guard lock(back_mutex);
    back.swap(handed_back);
  }
  const auto now = Clock::now();
  for (const auto& [fd, keep] : back) {
    const auto it = entries.find(fd);
    if (it == entries.end()) continue;
    Entry& e = *it->second;
    if (!keep || stopping || e.connection->hung_up()) close_entry(fd);
    else start_reading(e, now);
  }
}

void FrontDoor::Impl::check_deadlines() {
  const auto now = Clock::now();
  std::vector<int> expired;
  for (const auto& [fd, e] : entries)
    if (e->phase != Phase::kServing && now >= e->deadline) expired.push_back(fd);
  for (int fd : expired) {
    Entry& e = *entries.at(fd);
    if (e.phase == Phase::kReading && e.framer.started())
      send_refusal(e, Refusal{408,
                              e.framer.head_complete() ? "the request body did not arrive in time"
                                                       : "the request line and headers did not arrive in time",
                              e.framer.path(), e.framer.has_anthropic_version()});
    else
      close_entry(fd);  // idle keep-alive, or done lingering
  }
}

void FrontDoor::Impl::send_refusal(Entry& e, Refusal refusal) {
  const std::string body = refuse(refusal);
  std::string reply = "HTTP/1.1 " + std::to_string(refusal.status) + " " + reason_phrase(refusal.status) +
                      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n";
  if (refusal.status == 429 || refusal.status == 503) reply += "Retry-After: 1\r\n";
  reply += "\r\n" + body;
  // One non-blocking attempt: a reply this small fits the socket's buffer,
  // and the loop must not wait for a client.
  [[maybe_unused]] const ssize_t n = ::send(e.connection->fd(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(e.connection->fd(), SHUT_WR);
  e.phase = Phase::kLingering;
  e.deadline = Clock::now() + kLinger;
  set_events(e.connection->fd(), EPOLLIN | EPOLLRDHUP);
}

void FrontDoor::Impl::close_entry(int fd) {
  const auto it = entries.find(fd);
  if (it == entries.end()) return;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
  if (it->second->counted) {
    const auto c = per_client.find(it->second->connection->peer_address());
    if (c != per_client.end() && --c->second <= 0) per_client.erase(c);
  }
  entries.erase(it);  // the Connection closes the descriptor
}

}  // namespace rowlm::server
