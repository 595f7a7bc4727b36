#include "hub/digest.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace rowlm::hub {

struct Digest::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Digest::Digest(Kind kind) : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  ROWLM_CHECK(ctx_->md != nullptr, "EVP_MD_CTX_new failed");
  const EVP_MD* md = kind == Kind::Sha256 ? EVP_sha256() : EVP_sha1();
  ROWLM_CHECK(EVP_DigestInit_ex(ctx_->md, md, nullptr) == 1, "EVP_DigestInit_ex failed");
}

Digest::~Digest() = default;
Digest::Digest(Digest&&) noexcept = default;
Digest& Digest::operator=(Digest&&) noexcept = default;

void Digest::update(std::string_view bytes) {
  ROWLM_CHECK(ctx_ && EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) == 1, "EVP_DigestUpdate failed");
}

std::string Digest::hex() {
  ROWLM_CHECK(ctx_ != nullptr, "Digest used after hex()");
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  ROWLM_CHECK(EVP_DigestFinal_ex(ctx_->md, out, &n) == 1, "EVP_DigestFinal_ex failed");
  ctx_.reset();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) {
    s.push_back(kHex[out[i] >> 4]);
    s.push_back(kHex[out[i] & 15]);
  }
  return s;
}

Digest git_blob_digest(std::uint64_t size) {
  Digest d(Digest::Kind::Sha1);
  const std::string header = "blob " + std::to_string(size);
  d.update(std::string_view(header.data(), header.size() + 1));  // with its NUL
  return d;
}

std::string sha256_hex(std::string_view bytes) {
  Digest d(Digest::Kind::Sha256);
  d.update(bytes);
  return d.hex();
}

}  // namespace rowlm::hub
