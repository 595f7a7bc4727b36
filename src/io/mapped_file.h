#pragma once
// A whole file mapped read-only into memory (POSIX mmap). The mapping lives
// as long as the MappedFile; tensors viewing it hold a shared_ptr to it.
// Deleting or replacing the file is safe (the mapping keeps the old pages);
// truncating it in place while mapped makes later reads fault, which no
// validation can prevent.

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace rowlm {

class MappedFile {
  struct Key {  // only open() constructs a MappedFile
    explicit Key() = default;
  };

 public:
  // Maps `path`; throws rowlm::Error naming the path if it cannot be opened,
  // is not a regular file, or cannot be mapped. An empty file maps to an
  // empty span.
  static std::shared_ptr<const MappedFile> open(const std::string& path);

  MappedFile(Key, std::string path, const std::byte* data, std::size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace rowlm
