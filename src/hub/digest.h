#pragma once
// Incremental SHA-256 and SHA-1 (OpenSSL's libcrypto), as lower-case hex:
// the Hub names LFS files by their SHA-256 and other files by their git blob
// id, the SHA-1 of "blob <size>\0" followed by the content.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace rowlm::hub {

class Digest {
 public:
  enum class Kind { Sha256, Sha1 };
  explicit Digest(Kind kind);
  ~Digest();
  Digest(Digest&&) noexcept;
  Digest& operator=(Digest&&) noexcept;

  void update(std::string_view bytes);
  // The hex digest of everything given; the Digest is then spent.
  std::string hex();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// A SHA-1 primed with git's blob header for a file of `size` bytes.
Digest git_blob_digest(std::uint64_t size);

// The hex SHA-256 of `bytes` (tests, small files).
std::string sha256_hex(std::string_view bytes);

}  // namespace rowlm::hub
