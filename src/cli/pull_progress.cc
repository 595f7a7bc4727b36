#ifdef ROWLM_HAVE_HUB

#include "cli/pull_progress.h"

#include <unistd.h>

#include <cstdio>

namespace rowlm::cli {

std::string human_bytes(std::uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[unit]);
  return buf;
}

namespace {

std::string clock_time(double seconds) {
  const long s = long(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

PullProgress::PullProgress() : terminal_(::isatty(STDERR_FILENO) == 1) {}

void PullProgress::listed(const std::string& commit, std::size_t files) {
  std::fprintf(stderr, "rowlm pull: commit %s, %zu files\n", commit.c_str(), files);
}

void PullProgress::cached(const std::string& file) { std::fprintf(stderr, "  %s  cached\n", file.c_str()); }

void PullProgress::started(const std::string& file, std::uint64_t from, std::uint64_t total) {
  started_at_ = std::chrono::steady_clock::now();
  drawn_at_ = {};
  from_ = from;
  done_ = from;
  total_ = total;
  if (from > 0 && !terminal_)
    std::fprintf(stderr, "  %s  resuming at %s of %s\n", file.c_str(), human_bytes(from).c_str(),
                 human_bytes(total).c_str());
  draw(file, from, total, false);
}

void PullProgress::progressed(const std::string& file, std::uint64_t done, std::uint64_t total) {
  done_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (now - drawn_at_ < std::chrono::milliseconds(100)) return;
  draw(file, done, total, false);
}

void PullProgress::finished(const std::string& file) { draw(file, total_, total_, true); }

void PullProgress::retrying(const std::string& file, const std::string& why) {
  if (line_open_) std::fputc('\n', stderr);
  line_open_ = false;
  std::fprintf(stderr, "  %s: %s; trying again\n", file.c_str(), why.c_str());
}

void PullProgress::draw(const std::string& file, std::uint64_t done, std::uint64_t total, bool final_line) {
  const auto now = std::chrono::steady_clock::now();
  drawn_at_ = now;
  const double secs = std::chrono::duration<double>(now - started_at_).count();
  const double rate = secs > 0 ? double(done - std::min(done, from_)) / secs : 0;
  if (final_line) {
    if (terminal_) std::fputc('\r', stderr);
    std::fprintf(stderr, "  %s  %s  done (%s/s)%s\n", file.c_str(), human_bytes(total).c_str(),
                 human_bytes(std::uint64_t(rate)).c_str(), terminal_ ? "\033[K" : "");
    line_open_ = false;
    return;
  }
  if (!terminal_) return;
  std::string left = "--:--";
  if (rate > 0 && total >= done) left = clock_time(double(total - done) / rate);
  std::fprintf(stderr, "\r  %s  %s / %s  %s/s  %s left\033[K", file.c_str(), human_bytes(done).c_str(),
               human_bytes(total).c_str(), human_bytes(std::uint64_t(rate)).c_str(), left.c_str());
  line_open_ = true;
}

void PullProgress::summary(const std::string& what, const hub::PullResult& result) const {
  std::fprintf(stderr, "rowlm pull: %s: %d files downloaded (%s), %d already cached; %s\n", what.c_str(),
               result.files_downloaded, human_bytes(result.bytes_downloaded).c_str(), result.files_cached,
               result.snapshot.c_str());
}

}  // namespace rowlm::cli

#endif  // ROWLM_HAVE_HUB
