#pragma once
// What rowlm pull shows on stderr while it downloads: on a terminal, one
// line per file redrawn in place (bytes, rate, time left); elsewhere (logs,
// pipes), one line per file when it is done.

#ifdef ROWLM_HAVE_HUB

#include <chrono>
#include <cstdint>
#include <string>

#include "hub/pull.h"

namespace rowlm::cli {

class PullProgress : public hub::PullObserver {
 public:
  PullProgress();

  void listed(const std::string& commit, std::size_t files) override;
  void cached(const std::string& file) override;
  void started(const std::string& file, std::uint64_t from, std::uint64_t total) override;
  void progressed(const std::string& file, std::uint64_t done, std::uint64_t total) override;
  void finished(const std::string& file) override;
  void retrying(const std::string& file, const std::string& why) override;

  // The closing line: what was downloaded and where the snapshot is.
  void summary(const std::string& what, const hub::PullResult& result) const;

 private:
  void draw(const std::string& file, std::uint64_t done, std::uint64_t total, bool final_line);

  bool terminal_;
  std::chrono::steady_clock::time_point started_at_, drawn_at_;
  std::uint64_t from_ = 0, done_ = 0, total_ = 0;
  bool line_open_ = false;  // a progress line is drawn without its newline
};

// "1.5 GiB", "312 KiB", "17 B".
std::string human_bytes(std::uint64_t bytes);

}  // namespace rowlm::cli

#endif  // ROWLM_HAVE_HUB
