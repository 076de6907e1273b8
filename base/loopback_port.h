// A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it).
// For local pods and tests, which run side by side and must not collide.
#pragma once

#include <cstdint>

namespace base {

// 0 when no port could be had.
uint16_t FreeLoopbackPort();

}  // namespace base
