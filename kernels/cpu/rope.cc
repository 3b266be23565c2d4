// Rotary position embedding (Su et al. 2021, eq. 34) in Hugging Face's
// rotate-half layout (transformers' LlamaRotaryEmbedding / rotate_half):
// head element i < hs/2 pairs with i + hs/2, turned by pos * theta^(-2i/hs).
// Positions are an argument, never implied by the row index, so a rank that
// holds a slice of the sequence (context parallel) passes its tokens' true
// positions. Invariants: each pair's cos and sin are evaluated in fp64 from
// the angle pos * (1 / theta^(2i/hs)) (every precision sees the same angles,
// rounded once to A); forward reads both elements of a pair before writing
// (in place is allowed); backward applies the transpose and adds once.
#include <cmath>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

namespace {

// cos and sin (Tn, hs/2) of each position's angles, in A.
template <class A>
void angles(std::vector<A>& c, std::vector<A>& s, const int32_t* pos, int Tn, int hs, double theta) {
  const int half = hs / 2;
  c.resize(size_t(Tn) * half);
  s.resize(c.size());
  for (int i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(theta, double(2 * i) / double(hs));
    for (int t = 0; t < Tn; ++t) {
      const double a = double(pos[t]) * inv_freq;
      c[size_t(t) * half + i] = A(std::cos(a));
      s[size_t(t) * half + i] = A(std::sin(a));
    }
  }
}

// The one loop both directions share: turn each (i, i + hs/2) pair of every
// head by the pair's angle. Forward turns by +angle and stores; backward
// applies the transpose (the turn by -angle) and adds into the gradient.
enum class Turn { forward_store, backward_add };

template <Turn D, class T>
void rope_turn(T* dst, const T* src, const int32_t* pos, int B, int Tn, int heads, int hs, int stride,
               double theta) {
  using A = acc_t<T>;
  std::vector<A> cs, sn;
  angles(cs, sn, pos, Tn, hs, theta);
  const int half = hs / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const size_t row = (size_t(b) * Tn + t) * size_t(stride);
      const A* c = cs.data() + size_t(t) * half;
      const A* s = sn.data() + size_t(t) * half;
      for (int h = 0; h < heads; ++h) {
        const T* x = src + row + size_t(h) * hs;
        T* o = dst + row + size_t(h) * hs;
        for (int i = 0; i < half; ++i) {
          const A a = load(x[i]), bb = load(x[i + half]);
          const A sin_i = D == Turn::forward_store ? s[i] : A(-s[i]);
          const A first = math::rope_first(a, bb, c[i], sin_i);
          const A second = math::rope_second(a, bb, c[i], sin_i);
          if constexpr (D == Turn::forward_store) {
            o[i] = store<T>(first);
            o[i + half] = store<T>(second);
          } else {
            add_into(o[i], first);
            add_into(o[i + half], second);
          }
        }
      }
    }
}

}  // namespace

template <class T>
void rope_forward(T* out, const T* inp, const int32_t* pos, int B, int Tn, int heads, int hs, int stride,
                  double theta) {
  rope_turn<Turn::forward_store>(out, inp, pos, B, Tn, heads, hs, stride, theta);
}

template <class T>
void rope_backward(T* dinp, const T* dout, const int32_t* pos, int B, int Tn, int heads, int hs, int stride,
                   double theta) {
  rope_turn<Turn::backward_add>(dinp, dout, pos, B, Tn, heads, hs, stride, theta);
}

#define PB_INSTANTIATE(T)                                                                             \
  template void rope_forward<T>(T*, const T*, const int32_t*, int, int, int, int, int, double);       \
  template void rope_backward<T>(T*, const T*, const int32_t*, int, int, int, int, int, double);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
