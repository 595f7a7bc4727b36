#include "hub/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace rowlm::hub {

FileLock::FileLock(const std::filesystem::path& path) {
  std::filesystem::create_directories(path.parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open the lock file " + path.string() + ": " + std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    throw Error("cannot lock " + path.string() + ": " + std::strerror(err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace rowlm::hub
