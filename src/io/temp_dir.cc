#include "io/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace rowlm {

TempDir::TempDir(const std::string& stem) {
  std::string pattern = std::filesystem::temp_directory_path().string() + "/" + stem + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw Error("cannot create a directory like " + pattern + ": " + std::strerror(errno));
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;  // best effort: a destructor must not throw
  std::filesystem::remove_all(path_, ec);
}

}  // namespace rowlm
