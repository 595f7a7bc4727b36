#pragma once
// Where a tensor's bytes live: host memory, or the memory of one GPU. A
// backend computes on one device; it accepts only tensors on that device
// (host tensors are the CPU backend's device tensors).

#include <cstdint>
#include <string>

namespace rowlm {

enum class DeviceKind : uint8_t { Host, Cuda };

struct Device {
  DeviceKind kind = DeviceKind::Host;
  int index = 0;  // which GPU; 0 for the host

  static Device host() { return {}; }
  static Device cuda(int index) { return {DeviceKind::Cuda, index}; }
  bool is_host() const { return kind == DeviceKind::Host; }
  bool operator==(const Device&) const = default;
  std::string name() const { return is_host() ? "host" : "cuda:" + std::to_string(index); }
};

}  // namespace rowlm
