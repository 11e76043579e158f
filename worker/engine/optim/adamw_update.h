// The per-element AdamW update of AdamW::Step on float32 CPU parameters, over one range
// of elements. Torch-free and compiled on its own with -O3 -fno-math-errno (see
// CMakeLists.txt): without errno semantics std::sqrt is one instruction, and the loop
// vectorises (sqrt and division are exact in vector form, so results are bit-identical
// to the scalar loop).
#pragma once

#include <cstdint>

namespace trainyard::engine {

struct AdamWScalars {
  float scale;     // gradient scale (the clip coefficient), applied when `scaled`
  float wd;        // 1 - lr·weight_decay, applied when `decays`
  float b1, a1;    // beta1, 1 - beta1
  float b2, a2;    // beta2, 1 - beta2
  float root_bc2;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step;  // -lr / (1 - beta1^step)
  bool scaled, decays;
};

// For j in [begin, end): m = b1·m + a1·g, v = b2·v + a2·g², p = p·wd + neg_step·m /
// (sqrt(v)/root_bc2 + eps), with g = grad·scale.
void AdamWUpdate(float* p, float* m, float* v, const float* grad, int64_t begin, int64_t end,
                 const AdamWScalars& s);

}  // namespace trainyard::engine
