#pragma once
// An exclusive advisory lock on a file (flock), held for the object's life.
// huggingface_hub's filelock takes the same kind of lock on the same
// .locks/ files, so a Python download and a rowlm pull of one blob never
// write it at once.

#include <filesystem>

namespace rowlm::hub {

class FileLock {
 public:
  // Creates `path` (and its directory) if needed and waits for the lock;
  // throws rowlm::Error naming the path if it cannot.
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace rowlm::hub
