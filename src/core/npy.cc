#include "core/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace rowlm {

void write_npy(const std::string& path, const Tensor& t) {
  ROWLM_CHECK(t.dtype() == DType::F32, "write_npy needs f32");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < t.rank(); ++i) {
    if (i) header += ", ";
    header += std::to_string(t.dim(i));
  }
  if (t.rank() == 1) header += ",";
  header += "), }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error("cannot open " + path + " for writing");
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  const uint16_t len = uint16_t(header.size());
  out.put(char(len & 0xff));
  out.put(char(len >> 8));
  out.write(header.data(), std::streamsize(header.size()));
  out.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
  if (!out) throw Error("failed writing " + path);
}

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw Error(path + ": not a .npy file");
  uint32_t len = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    len = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  }
  std::string header(len, '\0');
  in.read(header.data(), len);
  if (!in) throw Error(path + ": truncated .npy header");
  if (header.find("'<f4'") == std::string::npos) throw Error(path + ": only little-endian float32 .npy is supported");
  if (header.find("'fortran_order': False") == std::string::npos) throw Error(path + ": Fortran order is not supported");
  const auto open = header.find('('), close = header.find(')');
  if (open == std::string::npos || close == std::string::npos) throw Error(path + ": bad .npy shape");
  Shape shape;
  std::stringstream ss(header.substr(open + 1, close - open - 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    shape.push_back(std::stoll(item));
  }
  Tensor t(DType::F32, shape);
  in.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes()));
  if (!in) throw Error(path + ": truncated .npy data");
  return t;
}

}  // namespace rowlm
