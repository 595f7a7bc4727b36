// A test server: rowlm's HTTP layer over a scripted engine whose every reply
// is the text given on the command line. The bundled tiny model never
// learned to call tools, so the SDK tests use this to check that the
// official clients understand the tool calls rowlm parses and streams.
//
//   scripted_server MODEL_DIR REPLY   (prints the address on stderr; SIGTERM stops it)

#include <csignal>
#include <cstdio>
#include <thread>

#include <pthread.h>

#include "server/fake_engine.h"
#include "server/server.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: scripted_server MODEL_DIR REPLY\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  try {
    rowlm::server::testing::FakeEngine engine(argv[1]);
    engine.reply = argv[2];
    engine.token_interval = std::chrono::milliseconds(1);
    rowlm::server::ServerOptions options;
    options.port = 0;
    options.log_requests = false;
    options.model_name = "rowlm-tiny";
    rowlm::server::HttpServer server(engine, options);
    const int port = server.bind();
    std::fprintf(stderr, "scripted_server: serving on http://127.0.0.1:%d\n", port);
    std::fflush(stderr);
    std::thread stopper([&] {
      int sig = 0;
      sigwait(&set, &sig);
      server.stop_accepting();
      engine.shutdown();
    });
    server.run();
    stopper.join();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scripted_server: %s\n", e.what());
    return 1;
  }
  return 0;
}
