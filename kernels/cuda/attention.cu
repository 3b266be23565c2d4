// Causal multi-head attention on the device: the materialized form (softmax
// probabilities kept, as kernels/cpu/attention.cc) and the blockwise
// online-softmax form (FlashAttention's forward recurrence, Dao et al. 2022,
// Alg. 1; FlashAttention-2's backward, Dao 2023, Alg. 2), whose block pieces
// ring attention reuses. The per-element math (scale, online rescale,
// finalize, P and dS of the backward, the causal mask) is
// kernels/common/math.h's, the CPU kernels' own.
// Layout: one thread owns one query row (or, for dk/dv, one key row) of one
// (batch, head) slice, blockIdx.y is the slice; keys (queries) are staged
// through shared memory in tiles of key_tile(hs) rows in fp32.
// Invariants: every output row is written by the one thread that owns it, in
// a fixed key (query) order: deterministic, no atomics; a row with no visible
// key in a block leaves its online state untouched and a state with m = -inf
// merges as zero weight, as on the CPU.
#include <stdexcept>
#include <string>

#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

constexpr int kRows = 64;  // threads (rows) per block

// Rows per shared-memory tile: two tiles of tile x hs floats stay within 32 KiB.
int key_tile(int hs) { return hs <= 128 ? kKeyTile : kKeyTile / 2; }

void check_head_size(int hs, const char* what) {
  if (hs < 1 || hs > kMaxHeadSize)
    throw std::invalid_argument(std::string(what) + ": head size " + std::to_string(hs) + " outside [1, " +
                                std::to_string(kMaxHeadSize) + "]");
}

// Where slice z = b * NH + h starts: in q/k/v (qkv rows), in dout/out rows, and
// in the per-slice fp32 state (rows x hs, or rows).
struct Slices {
  int NH = 1;
  size_t in_b = 0, in_h = 0;    // q, k, v
  size_t out_b = 0, out_h = 0;  // dout, out
};
// The (batch, head) slices of qkv (B,T,3C) and out/dout (B,T,C).
Slices heads_of(int Tn, int C, int NH) {
  Slices sl;
  sl.NH = NH;
  sl.in_b = size_t(Tn) * 3 * C;
  sl.in_h = size_t(C / NH);
  sl.out_b = size_t(Tn) * C;
  sl.out_h = size_t(C / NH);
  return sl;
}
__device__ __forceinline__ size_t in_off(const Slices& s, int z) { return size_t(z / s.NH) * s.in_b + size_t(z % s.NH) * s.in_h; }
__device__ __forceinline__ size_t out_off(const Slices& s, int z) {
  return size_t(z / s.NH) * s.out_b + size_t(z % s.NH) * s.out_h;
}

// Copies rows [r0, r0 + n) of a strided (rows, hs) slice into shared fp32.
template <class T>
__device__ void stage(float* dst, const T* src, int r0, int n, int hs, int stride) {
  for (int x = threadIdx.x; x < n * hs; x += blockDim.x) dst[x] = load(src[size_t(r0 + x / hs) * stride + x % hs]);
}

// Stages rows [r0, r0 + n) of two strided slices (k and v, or q and dout)
// into shared memory, between the barriers that keep a tile from being
// overwritten while another thread still reads it.
template <class T>
__device__ void stage_tiles(float* a_dst, const T* a, float* b_dst, const T* b, int r0, int n, int hs, int stride_a,
                            int stride_b) {
  __syncthreads();
  stage(a_dst, a, r0, n, hs, stride_a);
  stage(b_dst, b, r0, n, hs, stride_b);
  __syncthreads();
}

// Moves q, k and v to slice z.
template <class T>
__device__ void to_slice(const Slices& sl, int z, const T*& q, const T*& k, const T*& v) {
  const size_t off = in_off(sl, z);
  q += off;
  k += off;
  v += off;
}

// ---- blockwise forward: one query row per thread ------------------------------
template <class T>
__global__ void block_forward_kernel(float* o, float* m, float* l, const T* q, const T* k, const T* v, int Tq,
                                     int Tk, int hs, int q_stride, int kv_stride, int q_pos0, int k_pos0,
                                     bool causal, int tile, Slices sl) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = smem + tile * hs;
  const int z = blockIdx.y;
  to_slice(sl, z, q, k, v);
  o += size_t(z) * Tq * hs;
  m += size_t(z) * Tq;
  l += size_t(z) * Tq;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool mine = i < Tq;
  const int nk = mine ? math::visible_keys(Tk, q_pos0 + i, k_pos0, causal) : 0;
  const float scale = math::attention_scale<float>(hs);
  float mi = mine ? m[i] : 0.0f, li = mine ? l[i] : 0.0f;
  float s[kKeyTile];
  for (int j0 = 0; j0 < Tk; j0 += tile) {
    const int n = min(tile, Tk - j0);
    stage_tiles(ks, k, vs, v, j0, n, hs, kv_stride, kv_stride);
    const int vis = min(n, nk - j0);
    if (vis <= 0) continue;
    const T* qi = q + size_t(i) * q_stride;
    float mx = math::neg_inf<float>();
    for (int j = 0; j < vis; ++j) {
      float d = 0.0f;
      for (int c = 0; c < hs; ++c) d += load(qi[c]) * ks[j * hs + c];
      s[j] = d * scale;
      mx = math::max_a(mx, s[j]);
    }
    const float m_new = math::max_a(mi, mx), alpha = math::online_rescale(mi, m_new);
    float* oi = o + size_t(i) * hs;
    float sum = 0.0f;
    for (int j = 0; j < vis; ++j) s[j] = math::exp_a(s[j] - m_new), sum += s[j];
    for (int c = 0; c < hs; ++c) {
      float acc = oi[c] * alpha;
      for (int j = 0; j < vis; ++j) acc += s[j] * vs[j * hs + c];
      oi[c] = acc;
    }
    li = alpha * li + sum;
    mi = m_new;
  }
  if (mine) m[i] = mi, l[i] = li;
}

template <class T>
__global__ void block_finalize_kernel(T* out, float* lse, const float* o, const float* m, const float* l, int Tq,
                                      int hs, int out_stride, Slices sl, size_t lse_slice) {
  const int z = blockIdx.y;
  out += out_off(sl, z);
  o += size_t(z) * Tq * hs;
  m += size_t(z) * Tq;
  l += size_t(z) * Tq;
  const size_t n = size_t(Tq) * hs;
  for (size_t x = grid_index(); x < n; x += grid_stride()) {
    const int i = int(x / size_t(hs)), c = int(x % size_t(hs));
    out[size_t(i) * out_stride + c] = store<T>(o[x] * math::online_inv_sum(l[i]));
    if (lse && c == 0) lse[size_t(z) * lse_slice + i] = math::online_lse(m[i], l[i]);
  }
}

__global__ void block_merge_kernel(float* o, float* m, float* l, const float* o2, const float* m2, const float* l2,
                                   int Tq, int hs) {
  for (size_t i = grid_index(); i < size_t(Tq); i += grid_stride()) {
    const float m_new = math::max_a(m[i], m2[i]);
    if (m_new == math::neg_inf<float>()) continue;  // both empty
    const float a1 = math::online_rescale(m[i], m_new), a2 = math::online_rescale(m2[i], m_new);
    for (int c = 0; c < hs; ++c) o[i * hs + c] = a1 * o[i * hs + c] + a2 * o2[i * hs + c];
    l[i] = a1 * l[i] + a2 * l2[i];
    m[i] = m_new;
  }
}

// ---- blockwise backward ---------------------------------------------------------
// dq: one query row per thread over the visible keys.
template <class T>
__global__ void block_dq_kernel(float* dq, const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                const float* Drow, int Tq, int Tk, int hs, int q_stride, int kv_stride,
                                int dout_stride, int q_pos0, int k_pos0, bool causal, int tile, Slices sl,
                                size_t row_slice) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = smem + tile * hs;
  const int z = blockIdx.y;
  to_slice(sl, z, q, k, v);
  dout += out_off(sl, z);
  dq += size_t(z) * Tq * hs;
  lse += size_t(z) * row_slice;
  Drow += size_t(z) * row_slice;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int nk = i < Tq ? math::visible_keys(Tk, q_pos0 + i, k_pos0, causal) : 0;
  const float scale = math::attention_scale<float>(hs);
  for (int j0 = 0; j0 < Tk; j0 += tile) {
    const int n = min(tile, Tk - j0);
    stage_tiles(ks, k, vs, v, j0, n, hs, kv_stride, kv_stride);
    const int vis = min(n, nk - j0);
    const T* qi = q + size_t(i) * q_stride;
    const T* doi = dout + size_t(i) * dout_stride;
    for (int j = 0; j < vis; ++j) {
      float s = 0.0f, dp = 0.0f;
      for (int c = 0; c < hs; ++c) s += load(qi[c]) * ks[j * hs + c], dp += load(doi[c]) * vs[j * hs + c];
      const float p = math::attention_prob(s, scale, lse[i]);
      const float ds = math::attention_dscore(p, dp, Drow[i], scale);
      for (int c = 0; c < hs; ++c) dq[size_t(i) * hs + c] += ds * ks[j * hs + c];
    }
  }
}

// dk, dv: one key row per thread over the queries that see it.
template <class T>
__global__ void block_dkdv_kernel(float* dk, float* dv, const T* q, const T* k, const T* v, const T* dout,
                                  const float* lse, const float* Drow, int Tq, int Tk, int hs, int q_stride,
                                  int kv_stride, int dout_stride, int q_pos0, int k_pos0, bool causal, int tile,
                                  Slices sl, size_t row_slice) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* ds_ = smem + tile * hs;  // dout rows
  const int z = blockIdx.y;
  to_slice(sl, z, q, k, v);
  dout += out_off(sl, z);
  dk += size_t(z) * Tk * hs;
  dv += size_t(z) * Tk * hs;
  lse += size_t(z) * row_slice;
  Drow += size_t(z) * row_slice;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const float scale = math::attention_scale<float>(hs);
  const T* kj = k + size_t(j) * kv_stride;
  const T* vj = v + size_t(j) * kv_stride;
  for (int i0 = 0; i0 < Tq; i0 += tile) {
    const int n = min(tile, Tq - i0);
    stage_tiles(qs, q, ds_, dout, i0, n, hs, q_stride, dout_stride);
    if (j >= Tk) continue;
    for (int r = 0; r < n; ++r) {
      const int i = i0 + r;
      if (j >= math::visible_keys(Tk, q_pos0 + i, k_pos0, causal)) continue;
      float s = 0.0f, dp = 0.0f;
      for (int c = 0; c < hs; ++c) s += qs[r * hs + c] * load(kj[c]), dp += ds_[r * hs + c] * load(vj[c]);
      const float p = math::attention_prob(s, scale, lse[i]);
      const float dsc = math::attention_dscore(p, dp, Drow[i], scale);
      for (int c = 0; c < hs; ++c) {
        dv[size_t(j) * hs + c] += p * ds_[r * hs + c];
        dk[size_t(j) * hs + c] += dsc * qs[r * hs + c];
      }
    }
  }
}

// D = rowsum(dout * out) per (slice, t), fp32.
template <class T>
__global__ void rowsum_kernel(float* D, const T* dout, const T* out, int Tn, int C, int hs, int NH, size_t n) {
  for (size_t x = grid_index(); x < n; x += grid_stride()) {
    const int z = int(x / size_t(Tn)), t = int(x % size_t(Tn)), b = z / NH, h = z % NH;
    const size_t base = (size_t(b) * Tn + t) * C + size_t(h) * hs;
    float d = 0.0f;
    for (int c = 0; c < hs; ++c) d += load(dout[base + c]) * load(out[base + c]);
    D[x] = d;
  }
}

// D (rows) = rowsum(dout * out) over cols, one thread per row.
template <class T>
__global__ void row_dot_kernel(float* D, const T* dout, const T* out, int rows, int cols, int stride) {
  for (size_t t = grid_index(); t < size_t(rows); t += grid_stride()) {
    float d = 0.0f;
    for (int c = 0; c < cols; ++c) d += load(dout[t * stride + c]) * load(out[t * stride + c]);
    D[t] = d;
  }
}

// dqkv (B,T,3C) += the fp32 per-slice dq, dk, dv (slice-major, (T,hs) each).
template <class T>
__global__ void scatter_dqkv_kernel(T* dqkv, const float* dq, const float* dk, const float* dv, int Tn, int C,
                                    int hs, int NH, size_t n) {
  for (size_t x = grid_index(); x < n; x += grid_stride()) {
    const int c = int(x % size_t(hs));
    const size_t zt = x / size_t(hs);
    const int t = int(zt % size_t(Tn)), z = int(zt / size_t(Tn)), b = z / NH, h = z % NH;
    T* row = dqkv + (size_t(b) * Tn + t) * 3 * C + size_t(h) * hs + c;
    add_into(row[0], dq[x]);
    add_into(row[C], dk[x]);
    add_into(row[2 * C], dv[x]);
  }
}

// ---- materialized attention: one (slice, query row) per thread ----------------
template <class T>
__global__ void attention_forward_kernel(T* out, T* att, const T* qkv, int Tn, int C, int NH, size_t n) {
  const int hs = C / NH;
  const float scale = math::attention_scale<float>(hs);
  for (size_t x = grid_index(); x < n; x += grid_stride()) {
    const int z = int(x / size_t(Tn)), t = int(x % size_t(Tn)), b = z / NH, h = z % NH;
    const T* base = qkv + size_t(b) * Tn * 3 * C + size_t(h) * hs;
    const T* qt = base + size_t(t) * 3 * C;
    auto score = [&](int j) {
      const T* kj = base + size_t(j) * 3 * C + C;
      float d = 0.0f;
      for (int c = 0; c < hs; ++c) d += load(qt[c]) * load(kj[c]);
      return d * scale;
    };
    float mx = math::neg_inf<float>();
    for (int j = 0; j <= t; ++j) mx = math::max_a(mx, score(j));
    float sum = 0.0f;
    for (int j = 0; j <= t; ++j) sum += math::exp_a(score(j) - mx);
    const float inv = 1.0f / sum;
    T* arow = att + (size_t(z) * Tn + t) * Tn;
    float acc[kMaxHeadSize];
    for (int c = 0; c < hs; ++c) acc[c] = 0.0f;
    for (int j = 0; j < Tn; ++j) {
      if (j > t) {
        arow[j] = store<T>(0.0f);
        continue;
      }
      const float p = math::exp_a(score(j) - mx) * inv;
      arow[j] = store<T>(p);
      const T* vj = base + size_t(j) * 3 * C + 2 * C;
      for (int c = 0; c < hs; ++c) acc[c] += p * load(vj[c]);
    }
    T* ot = out + (size_t(b) * Tn + t) * C + size_t(h) * hs;
    for (int c = 0; c < hs; ++c) ot[c] = store<T>(acc[c]);
  }
}

// dq per (slice, query row): dP_tj = dO_t . v_j, r_t = sum_j P_tj dP_tj,
// dS_tj = P_tj (dP_tj - r_t) scale; dq_t += sum_j dS_tj k_j; datt <- dP.
template <class T>
__global__ void attention_dq_kernel(T* dqkv, T* datt, float* r, const T* dout, const T* qkv, const T* att, int Tn,
                                    int C, int NH, size_t n) {
  const int hs = C / NH;
  const float scale = math::attention_scale<float>(hs);
  for (size_t x = grid_index(); x < n; x += grid_stride()) {
    const int z = int(x / size_t(Tn)), t = int(x % size_t(Tn)), b = z / NH, h = z % NH;
    const T* base = qkv + size_t(b) * Tn * 3 * C + size_t(h) * hs;
    const T* dot = dout + (size_t(b) * Tn + t) * C + size_t(h) * hs;
    const T* arow = att + (size_t(z) * Tn + t) * Tn;
    auto dprob = [&](int j) {
      const T* vj = base + size_t(j) * 3 * C + 2 * C;
      float d = 0.0f;
      for (int c = 0; c < hs; ++c) d += load(dot[c]) * load(vj[c]);
      return d;
    };
    float rt = 0.0f;
    for (int j = 0; j <= t; ++j) rt += load(arow[j]) * dprob(j);
    r[x] = rt;
    if (datt) {
      T* drow = datt + (size_t(z) * Tn + t) * Tn;
      for (int j = 0; j < Tn; ++j) drow[j] = store<T>(j <= t ? dprob(j) : 0.0f);
    }
    float acc[kMaxHeadSize];
    for (int c = 0; c < hs; ++c) acc[c] = 0.0f;
    for (int j = 0; j <= t; ++j) {
      const float ds = math::attention_dscore(load(arow[j]), dprob(j), rt, scale);
      const T* kj = base + size_t(j) * 3 * C + C;
      for (int c = 0; c < hs; ++c) acc[c] += ds * load(kj[c]);
    }
    T* dq = dqkv + (size_t(b) * Tn + t) * 3 * C + size_t(h) * hs;
    for (int c = 0; c < hs; ++c) add_into(dq[c], acc[c]);
  }
}

// dk, dv per (slice, key row j): sums over the queries t >= j.
template <class T>
__global__ void attention_dkdv_kernel(T* dqkv, const float* r, const T* dout, const T* qkv, const T* att, int Tn,
                                      int C, int NH, size_t n) {
  const int hs = C / NH;
  const float scale = math::attention_scale<float>(hs);
  for (size_t x = grid_index(); x < n; x += grid_stride()) {
    const int z = int(x / size_t(Tn)), j = int(x % size_t(Tn)), b = z / NH, h = z % NH;
    const T* base = qkv + size_t(b) * Tn * 3 * C + size_t(h) * hs;
    const T* vj = base + size_t(j) * 3 * C + 2 * C;
    float dk[kMaxHeadSize], dv[kMaxHeadSize];
    for (int c = 0; c < hs; ++c) dk[c] = dv[c] = 0.0f;
    for (int t = j; t < Tn; ++t) {
      const T* dot = dout + (size_t(b) * Tn + t) * C + size_t(h) * hs;
      const T* qt = base + size_t(t) * 3 * C;
      float dp = 0.0f;
      for (int e = 0; e < hs; ++e) dp += load(dot[e]) * load(vj[e]);
      const float p = load(att[(size_t(z) * Tn + t) * Tn + j]);
      const float ds = math::attention_dscore(p, dp, r[size_t(z) * Tn + t], scale);
      for (int c = 0; c < hs; ++c) {
        dk[c] += ds * load(qt[c]);
        dv[c] += p * load(dot[c]);
      }
    }
    T* drow = dqkv + (size_t(b) * Tn + j) * 3 * C + size_t(h) * hs;
    for (int c = 0; c < hs; ++c) {
      add_into(drow[C + c], dk[c]);
      add_into(drow[2 * C + c], dv[c]);
    }
  }
}

size_t smem_bytes(int tile, int hs) { return 2 * size_t(tile) * hs * sizeof(float); }
dim3 row_grid(int rows, int slices) { return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(slices)); }

// A stream-ordered fp32 scratch buffer, zeroed, freed on scope exit.
class Scratch {
 public:
  Scratch(size_t floats, cudaStream_t stream, const char* what) : stream_(stream) {
    check(cudaMallocAsync(reinterpret_cast<void**>(&p_), floats * sizeof(float), stream), what);
    const cudaError_t e = cudaMemsetAsync(p_, 0, floats * sizeof(float), stream);
    if (e != cudaSuccess) {
      cudaFreeAsync(p_, stream_);
      check(e, what);
    }
  }
  ~Scratch() { cudaFreeAsync(p_, stream_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
  cudaStream_t stream_;
};

__global__ void fill_kernel(float* x, float value, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) x[i] = value;
}

}  // namespace

template <class T>
void attention_block_forward(float* o, float* m, float* l, const T* q, const T* k, const T* v, int Tq, int Tk,
                             int hs, int q_stride, int kv_stride, int q_pos0, int k_pos0, bool causal,
                             cudaStream_t stream) {
  check_head_size(hs, "attention_block_forward");
  if (Tq <= 0 || Tk <= 0) return;
  const int tile = key_tile(hs);
  block_forward_kernel<<<row_grid(Tq, 1), kRows, smem_bytes(tile, hs), stream>>>(
      o, m, l, q, k, v, Tq, Tk, hs, q_stride, kv_stride, q_pos0, k_pos0, causal, tile, Slices{});
  check(cudaGetLastError(), "attention_block_forward launch");
}

template <class T>
void attention_block_finalize(T* out, float* lse, const float* o, const float* m, const float* l, int Tq, int hs,
                              int out_stride, cudaStream_t stream) {
  if (Tq <= 0 || hs <= 0) return;
  const size_t n = size_t(Tq) * hs;
  block_finalize_kernel<<<dim3(blocks_for(n), 1), 256, 0, stream>>>(out, lse, o, m, l, Tq, hs, out_stride,
                                                                    Slices{}, size_t(Tq));
  check(cudaGetLastError(), "attention_block_finalize launch");
}

void attention_block_merge(float* o, float* m, float* l, const float* o2, const float* m2, const float* l2, int Tq,
                           int hs, cudaStream_t stream) {
  if (Tq <= 0) return;
  block_merge_kernel<<<blocks_for(size_t(Tq)), 256, 0, stream>>>(o, m, l, o2, m2, l2, Tq, hs);
  check(cudaGetLastError(), "attention_block_merge launch");
}

template <class T>
void attention_block_backward(float* dq, float* dk, float* dv, const T* q, const T* k, const T* v, const T* dout,
                              const float* lse, const float* Drow, int Tq, int Tk, int hs, int q_stride,
                              int kv_stride, int dout_stride, int q_pos0, int k_pos0, bool causal,
                              cudaStream_t stream) {
  check_head_size(hs, "attention_block_backward");
  if (Tq <= 0 || Tk <= 0) return;
  const int tile = key_tile(hs);
  block_dq_kernel<<<row_grid(Tq, 1), kRows, smem_bytes(tile, hs), stream>>>(
      dq, q, k, v, dout, lse, Drow, Tq, Tk, hs, q_stride, kv_stride, dout_stride, q_pos0, k_pos0, causal, tile,
      Slices{}, size_t(Tq));
  check(cudaGetLastError(), "attention_block_backward dq launch");
  block_dkdv_kernel<<<row_grid(Tk, 1), kRows, smem_bytes(tile, hs), stream>>>(
      dk, dv, q, k, v, dout, lse, Drow, Tq, Tk, hs, q_stride, kv_stride, dout_stride, q_pos0, k_pos0, causal, tile,
      Slices{}, size_t(Tq));
  check(cudaGetLastError(), "attention_block_backward dk/dv launch");
}

template <class T>
void attention_row_dot(float* D, const T* dout, const T* out, int rows, int cols, int stride, cudaStream_t stream) {
  if (rows <= 0) return;
  row_dot_kernel<<<blocks_for(size_t(rows)), 256, 0, stream>>>(D, dout, out, rows, cols, stride);
  check(cudaGetLastError(), "attention_row_dot launch");
}

template <class T>
void attention_forward_blockwise(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH, int /*bs*/,
                                 cudaStream_t stream) {
  const int hs = NH > 0 ? C / NH : 0;
  check_head_size(hs, "attention_forward_blockwise");
  if (B <= 0 || Tn <= 0) return;
  const int slices = B * NH, tile = key_tile(hs);
  const size_t rows = size_t(slices) * Tn;
  Scratch o(rows * hs, stream, "attention_forward_blockwise o"), l(rows, stream, "attention_forward_blockwise l"),
      m(rows, stream, "attention_forward_blockwise m");
  fill_kernel<<<blocks_for(rows), 256, 0, stream>>>(m.get(), math::neg_inf<float>(), rows);
  check(cudaGetLastError(), "attention_forward_blockwise init launch");
  const Slices sl = heads_of(Tn, C, NH);
  block_forward_kernel<<<row_grid(Tn, slices), kRows, smem_bytes(tile, hs), stream>>>(
      o.get(), m.get(), l.get(), qkv, qkv + C, qkv + 2 * C, Tn, Tn, hs, 3 * C, 3 * C, 0, 0, true, tile, sl);
  check(cudaGetLastError(), "attention_forward_blockwise launch");
  block_finalize_kernel<<<dim3(blocks_for(size_t(Tn) * hs), unsigned(slices)), 256, 0, stream>>>(
      out, lse, o.get(), m.get(), l.get(), Tn, hs, C, sl, size_t(Tn));
  check(cudaGetLastError(), "attention_forward_blockwise finalize launch");
}

template <class T>
void attention_backward_blockwise(T* dqkv, const T* dout, const T* out, const T* qkv, const float* lse, int B,
                                  int Tn, int C, int NH, int /*bs*/, cudaStream_t stream) {
  const int hs = NH > 0 ? C / NH : 0;
  check_head_size(hs, "attention_backward_blockwise");
  if (B <= 0 || Tn <= 0) return;
  const int slices = B * NH, tile = key_tile(hs);
  const size_t rows = size_t(slices) * Tn;
  Scratch D(rows, stream, "attention_backward_blockwise D"), dq(rows * hs, stream, "attention_backward_blockwise dq"),
      dk(rows * hs, stream, "attention_backward_blockwise dk"), dv(rows * hs, stream, "attention_backward_blockwise dv");
  rowsum_kernel<<<blocks_for(rows), 256, 0, stream>>>(D.get(), dout, out, Tn, C, hs, NH, rows);
  check(cudaGetLastError(), "attention_backward_blockwise D launch");
  const Slices sl = heads_of(Tn, C, NH);
  block_dq_kernel<<<row_grid(Tn, slices), kRows, smem_bytes(tile, hs), stream>>>(
      dq.get(), qkv, qkv + C, qkv + 2 * C, dout, lse, D.get(), Tn, Tn, hs, 3 * C, 3 * C, C, 0, 0, true, tile, sl,
      size_t(Tn));
  check(cudaGetLastError(), "attention_backward_blockwise dq launch");
  block_dkdv_kernel<<<row_grid(Tn, slices), kRows, smem_bytes(tile, hs), stream>>>(
      dk.get(), dv.get(), qkv, qkv + C, qkv + 2 * C, dout, lse, D.get(), Tn, Tn, hs, 3 * C, 3 * C, C, 0, 0, true,
      tile, sl, size_t(Tn));
  check(cudaGetLastError(), "attention_backward_blockwise dk/dv launch");
  scatter_dqkv_kernel<<<blocks_for(rows * hs), 256, 0, stream>>>(dqkv, dq.get(), dk.get(), dv.get(), Tn, C, hs, NH,
                                                                 rows * hs);
  check(cudaGetLastError(), "attention_backward_blockwise scatter launch");
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, cudaStream_t stream) {
  check_head_size(NH > 0 ? C / NH : 0, "attention_forward");
  const size_t n = size_t(B) * NH * Tn;
  if (n == 0) return;
  attention_forward_kernel<<<blocks_for(n), 128, 0, stream>>>(out, att, qkv, Tn, C, NH, n);
  check(cudaGetLastError(), "attention_forward launch");
}

template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int NH,
                        cudaStream_t stream) {
  check_head_size(NH > 0 ? C / NH : 0, "attention_backward");
  const size_t n = size_t(B) * NH * Tn;
  if (n == 0) return;
  Scratch r(n, stream, "attention_backward r");
  attention_dq_kernel<<<blocks_for(n), 128, 0, stream>>>(dqkv, datt, r.get(), dout, qkv, att, Tn, C, NH, n);
  check(cudaGetLastError(), "attention_backward dq launch");
  attention_dkdv_kernel<<<blocks_for(n), 128, 0, stream>>>(dqkv, r.get(), dout, qkv, att, Tn, C, NH, n);
  check(cudaGetLastError(), "attention_backward dk/dv launch");
}

#define PB_INSTANTIATE(T)                                                                                          \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int, cudaStream_t);                          \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, cudaStream_t);     \
  template void attention_block_forward<T>(float*, float*, float*, const T*, const T*, const T*, int, int, int,     \
                                           int, int, int, int, bool, cudaStream_t);                                \
  template void attention_block_finalize<T>(T*, float*, const float*, const float*, const float*, int, int, int,   \
                                            cudaStream_t);                                                         \
  template void attention_block_backward<T>(float*, float*, float*, const T*, const T*, const T*, const T*,        \
                                            const float*, const float*, int, int, int, int, int, int, int, int,    \
                                            bool, cudaStream_t);                                                   \
  template void attention_row_dot<T>(float*, const T*, const T*, int, int, int, cudaStream_t);                    \
  template void attention_forward_blockwise<T>(T*, float*, const T*, int, int, int, int, int, cudaStream_t);       \
  template void attention_backward_blockwise<T>(T*, const T*, const T*, const T*, const float*, int, int, int,     \
                                                int, int, cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
