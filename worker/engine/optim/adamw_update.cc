#include "worker/engine/optim/adamw_update.h"

#include <cmath>

namespace trainyard::engine {
namespace {

template <bool kScaled, bool kDecays>
void Update(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict grad,
            int64_t begin, int64_t end, const AdamWScalars& s) {
  const float scale = s.scale, wd = s.wd, b1 = s.b1, a1 = s.a1, b2 = s.b2, a2 = s.a2;
  const float root_bc2 = s.root_bc2, eps = s.eps, neg_step = s.neg_step;
  for (int64_t j = begin; j < end; ++j) {
    const float g = kScaled ? grad[j] * scale : grad[j];
    const float w = kDecays ? p[j] * wd : p[j];
    const float mj = m[j] * b1 + a1 * g;
    const float vj = v[j] * b2 + a2 * g * g;
    m[j] = mj;
    v[j] = vj;
    p[j] = w + neg_step * mj / (std::sqrt(vj) / root_bc2 + eps);
  }
}

}  // namespace

void AdamWUpdate(float* p, float* m, float* v, const float* grad, int64_t begin, int64_t end,
                 const AdamWScalars& s) {
  if (s.scaled) {
    s.decays ? Update<true, true>(p, m, v, grad, begin, end, s) : Update<true, false>(p, m, v, grad, begin, end, s);
  } else {
    s.decays ? Update<false, true>(p, m, v, grad, begin, end, s) : Update<false, false>(p, m, v, grad, begin, end, s);
  }
}

}  // namespace trainyard::engine
