#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace rowlm {
namespace {

// Closes the descriptor on every path out of open(); the mapping keeps the
// file's pages reachable after close.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO (or a device) named like a weights file
  // would otherwise block until a writer appears; this way it opens at once
  // and fstat below refuses it. It changes nothing for a regular file.
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw Error("cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(path + " is not a regular file");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) return std::make_shared<const MappedFile>(Key{}, path, nullptr, 0);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (data == MAP_FAILED) throw Error("cannot map " + path + ": " + std::strerror(errno));
  return std::make_shared<const MappedFile>(Key{}, path, static_cast<const std::byte*>(data), size);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace rowlm
