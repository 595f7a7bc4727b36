#pragma once
// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// when the TempDir goes away. Tests build checkpoints in one.

#include <string>

namespace rowlm {

class TempDir {
 public:
  explicit TempDir(const std::string& stem = "rowlm");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace rowlm
