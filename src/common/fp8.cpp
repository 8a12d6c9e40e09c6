#include "blockfuse/fp8.h"

#include <cstdint>
#include <utility>

#include "blockfuse/gated_up_fp8.h"
#include "common/check.h"

namespace blockfuse {

namespace {

// The FP8 enums' names, one table each; "unknown" for a code outside the enum.
template <class E, int N>
const char* enum_name(E m, const std::pair<E, const char*> (&names)[N]) {
  for (const auto& [value, name] : names)
    if (value == m) return name;
  return "unknown";
}

constexpr std::pair<Fp8ScaleMode, const char*> kScaleModeNames[] = {
    {Fp8ScaleMode::kStaticPerTensor, "static_per_tensor"},
    {Fp8ScaleMode::kDynamicPerRow, "dynamic_per_row"},
};

constexpr std::pair<Fp8InputScaleMode, const char*> kInputScaleModeNames[] = {
    {Fp8InputScaleMode::kPerTensor, "per_tensor"},
    {Fp8InputScaleMode::kPerRow, "per_row"},
};

}  // namespace

const char* fp8_scale_mode_name(Fp8ScaleMode m) { return enum_name(m, kScaleModeNames); }

const char* fp8_input_scale_mode_name(Fp8InputScaleMode m) { return enum_name(m, kInputScaleModeNames); }

}  // namespace blockfuse

namespace blockfuse::detail {

void check_fp8_matrix_shape(const char* fn, const char* arg, const Fp8Matrix& m, int align_bytes) {
  if (m.rows < 0) throw_arg(fn, arg, cat("has rows = ", m.rows), "rows >= 0");
  if (m.cols < 0) throw_arg(fn, arg, cat("has cols = ", m.cols), "cols >= 0");
  if (m.ld < m.cols || m.ld < 1)
    throw_arg(fn, arg, cat("has row stride ld = ", m.ld, " with cols = ", m.cols), "ld >= cols and ld >= 1");
  if (m.rows > (int64_t{1} << 40) / m.ld)
    throw_arg(fn, arg, cat("spans rows * ld = ", m.rows, " * ", m.ld, " bytes"), "rows * ld < 2^40");
  if (m.data == nullptr && m.rows > 0 && m.cols > 0)
    throw_arg(fn, arg, "has a null data pointer", "a valid pointer for a non-empty matrix");
  check_pointer_alignment(fn, arg, m.data, align_bytes);
  if (m.ld % align_bytes != 0)
    throw_arg(fn, arg, cat("has row stride ld = ", m.ld), cat("ld % ", align_bytes, " == 0"));
}

Span span_of(const Fp8Matrix& m) {
  if (m.rows == 0 || m.cols == 0) return span_of_bytes(m.data, 0);
  return span_of_bytes(m.data, (m.rows - 1) * m.ld + m.cols);
}

void check_fp8_scale_mode(const char* fn, const char* arg, Fp8ScaleMode mode) {
  if (mode != Fp8ScaleMode::kStaticPerTensor && mode != Fp8ScaleMode::kDynamicPerRow)
    throw_arg(fn, arg, cat("has mode code ", static_cast<int>(mode)),
              "Fp8ScaleMode::kStaticPerTensor or Fp8ScaleMode::kDynamicPerRow");
}

void check_fp8_scale_pointer(const char* fn, const char* arg, const Fp8Scale& s, int64_t rows, bool null_ok) {
  if (s.scale == nullptr && !null_ok)
    throw_arg(fn, arg, "has a null scale pointer",
              s.mode == Fp8ScaleMode::kStaticPerTensor
                  ? "a device pointer to the per-tensor scale (1 float, > 0)"
                  : cat("a device pointer to ", rows, " floats (one scale per row, written)"));
  if (reinterpret_cast<std::uintptr_t>(s.scale) % alignof(float) != 0)
    throw_arg(fn, arg, cat("scale pointer ", static_cast<const void*>(s.scale), " is not 4-byte aligned"),
              "a 4-byte aligned float pointer");
}

void check_fp8_scale(const char* fn, const char* arg, const Fp8Scale& s, int64_t rows, bool on_device) {
  check_fp8_scale_mode(fn, arg, s.mode);
  check_fp8_scale_pointer(fn, arg, s, rows, /*null_ok=*/false);
  if (on_device) check_device_pointer(fn, arg, s.scale);
}

Span span_of(const Fp8Scale& s, int64_t rows) {
  return span_of_bytes(s.scale, static_cast<int64_t>(sizeof(float)) *
                                    (s.mode == Fp8ScaleMode::kDynamicPerRow ? rows : 1));
}

}  // namespace blockfuse::detail
