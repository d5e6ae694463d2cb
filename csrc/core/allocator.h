// The core never allocates device memory itself: the binding hands it an
// allocator (for torch, the caching allocator), so memory stays visible to and
// reusable by the framework.
#pragma once

#include <cstddef>

namespace grouped_linear {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // Memory usable on `stream` of device `device`. Throws on failure.
  virtual void* allocate(size_t bytes, int device, void* stream) = 0;
  virtual void deallocate(void* ptr) = 0;
};

}  // namespace grouped_linear
