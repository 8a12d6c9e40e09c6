#include "blockfuse/fp8.h"

namespace blockfuse {

const char* fp8_scale_mode_name(Fp8ScaleMode m) {
  switch (m) {
    case Fp8ScaleMode::kStaticPerTensor: return "static_per_tensor";
    case Fp8ScaleMode::kDynamicPerRow: return "dynamic_per_row";
  }
  return "unknown";
}

}  // namespace blockfuse
