// Banded's forward–backward as a CPU kernel for XLA's FFI (DESIGN.md §3, "Banded"; the Python side,
// which compiles and registers it, is banded_native.py).
//
// Each row is one chain of `len` spins (a query's keys), with fields h_t and couplings B(t, d) of spin t
// to spin t - d, d = 1..w (J's band, jw[t, w - d], shared by the rows of a group). The state after spin
// t is the last w spins, kept in a circular register: spin t sits at bit p = t mod w, so adding spin t
// overwrites the bit of spin t - w, and a step is one butterfly over bit p (like a stage of an FFT):
//
//   a_t(x[p<-y]) = d_t(y) sum_l a_{t-1}(x[p<-l]) K_t(x[p<-l], y),   K_t(x, y) = exp(beta s_y sum_d B(t,d) s_{t-d}(x)).
//
// Bit 0 is spin +1. The w spins before spin 0 are free (zero couplings): a factor 2^w in Z.
//
// V rows of one group run together, one per SIMD lane: every array is [state][lane], so each loop is a
// plain lane-parallel multiply-add whatever the bit p, and the tables K_t, shared by the group, are
// broadcast. The blocks of V rows run on XLA's intra-op threads (those of the CPU client: one per usable
// core), each thread with its own buffers and tables. Messages are rescaled at every step by a power of
// two (exact) that brings their max into [1, 2), folded into the next step's field factor. Rows of
// different lengths (causal prefixes) share a block: the backward message of a row is 0 until its last
// spin, where it starts at 1.
//
// The VJP is the tangent of forward–backward along h + eps g (g: the cotangent of the means): for
// G = sum_j g_j s_j, d/deps <s_t> = beta Cov(G, s_t) is the cotangent of h_t, and d/deps <s_t s_u> that of
// J_tu (the Hessian of log Z is symmetric). Dual numbers (a, a') are rescaled by the same real factors,
// which cancel in every ratio. The cotangent of log Z adds beta <s_t> and beta <s_t s_u>.
//
// Underflow: a stored message's max can be far below 1 (the tables are normalized over all states, not the
// likely ones), so a message is brought into [1, 2) by its power-of-two scale before it multiplies
// anything, and the field factor (<= 1) comes last. Every product is then of factors <= 2, so a stored
// entry flushes by less than 16 tiny; the relative effect on Z of the entries of a_t (b_t) is at most
// 16 S tiny max(b_t) / sum(a_t b_t) (likewise for b), a and b as stored.
// `lost` is the log of the sum of these first-order bounds over the steps (inf when a message vanished).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int V = 8;  // rows per block: one per lane
constexpr int U = 4;  // independent accumulators of a reduction: one chain would wait on every add's latency

typedef float vf __attribute__((vector_size(sizeof(float) * V)));
typedef double vd __attribute__((vector_size(sizeof(double) * V)));
template <typename T>
struct Lane;
template <>
struct Lane<float> {
  using vec = vf;
  using U = uint32_t;
  static constexpr int kMant = 23, kBias = 127, kMaxE = 254;
};
template <>
struct Lane<double> {
  using vec = vd;
  using U = uint64_t;
  static constexpr int kMant = 52, kBias = 1023, kMaxE = 2046;
};

// For m > 0 normal: the power of two 2^-e with m 2^-e in [1, 2), and e. Otherwise (0, subnormal, inf,
// nan): scale 1 and ok = false.
template <typename T>
inline T pow2_scale(T m, int* e, bool* ok) {
  using B = Lane<T>;
  typename B::U u;
  std::memcpy(&u, &m, sizeof(T));
  const int E = int(u >> B::kMant);  // sign bit 0 for m >= 0
  if (!(m > 0) || E < 1 || E > B::kMaxE - 1) {
    *ok = false;
    *e = 0;
    return T(1);
  }
  *e = E - B::kBias;
  typename B::U s = typename B::U(B::kMaxE - E) << B::kMant;
  T out;
  std::memcpy(&out, &s, sizeof(T));
  return out;
}

// The tables K_t(x, +1), K_t(x, -1) of every spin of a group, over their max: K [n, 2, S]; shift [n].
template <typename T>
void build_tables(const T* jw, int n, int w, T beta, T* K, double* shift) {
  const int S = 1 << w;
  std::vector<T> c(w), e(S);
  for (int t = 0; t < n; ++t) {
    const int p = t % w;
    T total = 0, abs_total = 0;
    for (int q = 0; q < w; ++q) {
      int d = ((p - q) % w + w) % w;
      if (d == 0) d = w;  // bit p still holds spin t - w, the one this step drops
      c[q] = jw[(int64_t)t * w + (w - d)];
      total += c[q];
      abs_total += std::abs(c[q]);
    }
    e[0] = total;  // all spins +1
    for (int q = 0; q < w; ++q)
      for (int x = 1 << q; x < 2 << q; ++x) e[x] = e[x - (1 << q)] - 2 * c[q];
    const T sh = std::abs(beta) * abs_total;
    T* K0 = K + (int64_t)t * 2 * S;
    T* K1 = K0 + S;
    for (int x = 0; x < S; ++x) {
      K0[x] = std::exp(beta * e[x] - sh);
      K1[x] = std::exp(-beta * e[x] - sh);
    }
    shift[t] = sh;
  }
}

template <typename vec>
inline vec vmax(vec a, vec b) {
  return a > b ? a : b;
}

// max over the states, per lane (S >= 1).
template <typename vec>
inline vec lane_max(const vec* __restrict a, int S) {
  vec acc[U] = {a[0], a[0], a[0], a[0]};
  int x = 0;
  for (; x + U <= S; x += U)
    for (int k = 0; k < U; ++k) acc[k] = vmax(acc[k], a[x + k]);
  for (; x < S; ++x) acc[0] = vmax(acc[0], a[x]);
  return vmax(vmax(acc[0], acc[1]), vmax(acc[2], acc[3]));
}

// sum_x a[x] b[x] per lane.
template <typename vec>
inline vec lane_dot(const vec* __restrict a, const vec* __restrict b, int S) {
  vec acc[U] = {};
  int x = 0;
  for (; x + U <= S; x += U)
    for (int k = 0; k < U; ++k) acc[k] += a[x + k] * b[x + k];
  for (; x < S; ++x) acc[0] += a[x] * b[x];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// Per lane: sum_x s_q(x) f(x) for every bit q (into P[q]); returns sum_x f(x). Folds f in place.
template <typename vec>
inline vec project(vec* __restrict f, int w, vec* __restrict P) {
  for (int q = w - 1; q >= 0; --q) {
    const int half = 1 << q;
    vec diff[U] = {};
    int i = 0;
    for (; i + U <= half; i += U)
      for (int k = 0; k < U; ++k) {
        const vec lo = f[i + k], hi = f[i + k + half];
        diff[k] += lo - hi;
        f[i + k] = lo + hi;
      }
    for (; i < half; ++i) {
      const vec lo = f[i], hi = f[i + half];
      diff[0] += lo - hi;
      f[i] = lo + hi;
    }
    P[q] = (diff[0] + diff[1]) + (diff[2] + diff[3]);
  }
  return f[0];
}

// One forward step over bit p: o = f (K^T (s a)), and its tangent (bg = beta g_t per lane); s (a power of
// two) brings max a into [1, 2) first, f0, f1 are the field factors. Returns max o.
template <typename T, bool TAN, typename vec = typename Lane<T>::vec>
inline vec alpha_step(const vec* __restrict a, const vec* __restrict at, vec* __restrict o, vec* __restrict ot,
                      const T* __restrict K0, const T* __restrict K1, int S, int p, vec s, vec d0, vec d1,
                      vec bg) {
  const int st = 1 << p;
  vec m0 = {}, m1 = {};
  for (int base = 0; base < S; base += 2 * st)
    for (int j = 0; j < st; ++j) {
      const int x0 = base + j, x1 = x0 + st;
      const T k00 = K0[x0], k01 = K0[x1], k10 = K1[x0], k11 = K1[x1];
      const vec a0 = s * a[x0], a1 = s * a[x1];
      const vec A0 = a0 * k00 + a1 * k01, A1 = a0 * k10 + a1 * k11;
      const vec o0 = d0 * A0, o1 = d1 * A1;
      o[x0] = o0;
      o[x1] = o1;
      m0 = vmax(m0, o0);
      m1 = vmax(m1, o1);
      if (TAN) {
        const vec at0 = s * at[x0], at1 = s * at[x1];
        ot[x0] = d0 * (at0 * k00 + at1 * k01 + bg * A0);
        ot[x1] = d1 * (at0 * k10 + at1 * k11 - bg * A1);
      }
    }
  return vmax(m0, m1);
}

template <typename To, typename From>
inline To cvt(From x) {
  return __builtin_convertvector(x, To);
}

// Sums of one backward step, per lane: z = sum_x a nb, M = sum_x a r (= z <s_t>), mb = max nb; for the
// gradient also zt (the tangent of z), the correlations of s_t with the bit p (P, Pt), and the products
// a r, (a r)' summed over bit p, F and Ft [S / 2] (their other bits are folded by project()).
template <typename vec>
struct StepSums {
  vec z, M, mb, zt, P, Pt;
};

// One backward step over bit p, fused with the sums it feeds: nb = K (d b) (the message before spin t),
// r = K (d s b) (s: spin t), and their tangents, never stored; a (at): the forward message before spin t,
// taken times sa (a power of two that brings max a into [1, 2)), so z, M and their tangents carry sa.
template <typename T, bool TAN, typename Acc, typename vec = typename Lane<T>::vec>
inline StepSums<vec> beta_step(const vec* __restrict b, const vec* __restrict bt, const vec* __restrict a,
                               const vec* __restrict at, vec* __restrict nb, vec* __restrict nbt, vec* __restrict F,
                               vec* __restrict Ft, const T* __restrict K0, const T* __restrict K1, int S, int p,
                               vec d0, vec d1, vec bg, vec sa) {
  const int st = 1 << p;
  Acc z = {}, M = {}, zt = {}, P = {}, Pt = {};  // sums over the 2^(w-1) pairs (Acc: see block)
  vec m0 = {}, m1 = {};
  for (int base = 0; base < S; base += 2 * st)
    for (int j = 0; j < st; ++j) {
      const int x0 = base + j, x1 = x0 + st, c = (base >> 1) + j;
      const T k00 = K0[x0], k01 = K1[x0], k10 = K0[x1], k11 = K1[x1];
      const vec v0 = d0 * b[x0], v1 = d1 * b[x1];
      const vec u00 = k00 * v0, u01 = k01 * v1, u10 = k10 * v0, u11 = k11 * v1;
      const vec n0 = u00 + u01, n1 = u10 + u11, r0 = u00 - u01, r1 = u10 - u11;
      const vec a0 = sa * a[x0], a1 = sa * a[x1];
      nb[x0] = n0;
      nb[x1] = n1;
      m0 = vmax(m0, n0);
      m1 = vmax(m1, n1);
      z += cvt<Acc>(a0 * n0 + a1 * n1);
      const vec f0 = a0 * r0, f1 = a1 * r1;
      M += cvt<Acc>(f0 + f1);
      if (TAN) {
        const vec w0 = d0 * (bt[x0] + bg * b[x0]), w1 = d1 * (bt[x1] - bg * b[x1]);
        const vec t00 = k00 * w0, t01 = k01 * w1, t10 = k10 * w0, t11 = k11 * w1;
        const vec nt0 = t00 + t01, nt1 = t10 + t11, rt0 = t00 - t01, rt1 = t10 - t11;
        const vec at0 = sa * at[x0], at1 = sa * at[x1];
        nbt[x0] = nt0;
        nbt[x1] = nt1;
        zt += cvt<Acc>(at0 * n0 + a0 * nt0 + at1 * n1 + a1 * nt1);
        const vec g0 = at0 * r0 + a0 * rt0, g1 = at1 * r1 + a1 * rt1;
        P += cvt<Acc>(f0 - f1);
        Pt += cvt<Acc>(g0 - g1);
        F[c] = f0 + f1;
        Ft[c] = g0 + g1;
      }
    }
  return {cvt<vec>(z), cvt<vec>(M), vmax(m0, m1), cvt<vec>(zt), cvt<vec>(P), cvt<vec>(Pt)};
}

// The buffers of one block (V rows, lane-major), reused block after block.
template <typename T>
struct Work {
  using vec = typename Lane<T>::vec;
  int n, w, S;
  std::vector<vec> A, At;                         // the forward message (and tangent) before every step: [n + 1][S]
  std::vector<vec> b, bt, nb, nbt, f, ft;        // [S]; f, ft: the folded products a r, (a r)' [S / 2]
  std::vector<vec> cm, cs;                        // max of the stored forward message, its scale: [n + 1]
  std::vector<vec> bh, u, bg;                     // beta h, exp(-2 |beta h|), beta g: [n]
  std::vector<vec> P, Pt;                         // [w]
  Work(int n_, int w_, bool tan)
      : n(n_), w(w_), S(1 << w_), A((int64_t)(n_ + 1) * S), At(tan ? (int64_t)(n_ + 1) * S : 0), b(S), bt(S), nb(S),
        nbt(S), f(S), ft(S), cm(n_ + 1), cs(n_ + 1), bh(n_), u(n_), bg(n_), P(w_), Pt(w_) {}
};

// The field factors of spin t per lane, times the scale s: d(+1), d(-1) = (s, s u) or (s u, s).
template <typename T, typename vec>
inline void fields(const Work<T>& W, int t, vec s, vec* d0, vec* d1) {
  const vec su = W.u[t] * s;
  for (int l = 0; l < V; ++l) {
    const bool pos = W.bh[t][l] >= 0;
    (*d0)[l] = pos ? s[l] : su[l];
    (*d1)[l] = pos ? su[l] : s[l];
  }
}

// V rows (lane l: length len[l] >= 1, live[l] false for padding or no cotangent) of one group, with W.bh,
// W.u (and W.bg) filled. Forward (GRAD false): mean [V][n], log_z, lost. Backward: gh [V][n] and gB [n][w]
// (added to), for the cotangent glz[l] of log Z.
template <typename T, bool GRAD>
void block(Work<T>& W, const int* len, const bool* live, const T* K, T beta, T* mean, double* log_z,
           double* lost, const T* glz, T* gh, double* gB) {
  using vec = typename Lane<T>::vec;
  const int n = W.n, w = W.w, S = W.S;
  const double tiny = std::numeric_limits<T>::min();
  int L = 0;
  for (int l = 0; l < V; ++l) L = std::max(L, len[l]);
  bool ok[V];
  int lam[V] = {};  // log2 of the scales taken out of the forward message
  vec s = {}, d0 = {}, d1 = {}, zero = {};
  for (int l = 0; l < V; ++l) ok[l] = true, s[l] = 1;

  vec* A = W.A.data();
  vec* At = GRAD ? W.At.data() : nullptr;
  std::fill(A, A + S, zero + 1);
  if (GRAD) std::fill(At, At + S, zero);
  W.cm[0] = W.cs[0] = zero + 1;
  for (int t = 0; t < L; ++t) {
    fields(W, t, zero + 1, &d0, &d1);
    const T* K0 = K + (int64_t)t * 2 * S;
    vec* prev = A + (int64_t)t * S;
    const vec m = GRAD ? alpha_step<T, true>(prev, At + (int64_t)t * S, prev + S, At + (int64_t)(t + 1) * S, K0,
                                             K0 + S, S, t % w, s, d0, d1, W.bg[t])
                       : alpha_step<T, false>(prev, (const vec*)nullptr, prev + S, (vec*)nullptr, K0, K0 + S, S,
                                              t % w, s, d0, d1, zero);
    W.cm[t + 1] = m;
    for (int l = 0; l < V; ++l) {
      int e;
      bool good = true;
      s[l] = pow2_scale(m[l], &e, &good);
      W.cs[t + 1][l] = s[l];
      if (t < len[l]) ok[l] = ok[l] && good;
      if (t + 1 < len[l]) lam[l] += e;  // the last message enters log Z unscaled
    }
  }
  if (!GRAD) {  // log Z = log2-scales + the fields' shifts + log sum of the last message - w log 2 (+ the tables')
    for (int l = 0; l < V; ++l) {
      double sum = 0, sh = 0;
      const vec* last = A + (int64_t)len[l] * S;
      for (int x = 0; x < S; ++x) sum += last[x][l];
      for (int t = 0; t < len[l]; ++t) sh += std::abs(double(W.bh[t][l]));
      log_z[l] = (lam[l] - w) * std::log(2.0) + sh + std::log(sum);
    }
  }

  vec* b = W.b.data();
  vec* bt = W.bt.data();
  std::fill(b, b + S, zero);
  if (GRAD) std::fill(bt, bt + S, zero);
  vec sb = zero + 1, mbb = zero + 1;  // scale of b; max b_t (for the bound)
  double zb[V], bound[V] = {};        // sum a_t b_t, a_t as stored (for the bound)
  for (int l = 0; l < V; ++l) zb[l] = 1;
  for (int t = L - 1; t >= 0; --t) {
    const int p = t % w;
    for (int l = 0; l < V; ++l)
      if (t == len[l] - 1) {  // the row's last spin: its backward message starts here
        double sum = 0;
        for (int x = 0; x < S; ++x) b[x][l] = 1, sum += A[(int64_t)(t + 1) * S + x][l];
        sb[l] = 1, zb[l] = sum, mbb[l] = 1;
      }
    if (!GRAD)  // flushed in a_t, weighted by b_t
      for (int l = 0; l < V; ++l)
        if (t < len[l]) bound[l] += double(mbb[l]) / zb[l];
    fields(W, t, sb, &d0, &d1);
    const T* K0 = K + (int64_t)t * 2 * S;
    const vec* a = A + (int64_t)t * S;  // the forward message before spin t
    const vec sa = W.cs[t];  // brings max a into [1, 2)
    // float32 sums over 2^(w-1) pairs lose accuracy as w grows (3e-5 in the means at w = 12): from w = 9 on
    // they accumulate in double, which costs about a third of the kernel's time at w = 8
    auto step = [&](auto acc) {
      using Acc = decltype(acc);
      return GRAD ? beta_step<T, true, Acc>(b, bt, a, At + (int64_t)t * S, W.nb.data(), W.nbt.data(), W.f.data(),
                                            W.ft.data(), K0, K0 + S, S, p, d0, d1, W.bg[t], sa)
                  : beta_step<T, false, Acc>(b, (const vec*)nullptr, a, (const vec*)nullptr, W.nb.data(),
                                             (vec*)nullptr, (vec*)nullptr, (vec*)nullptr, K0, K0 + S, S, p, d0, d1,
                                             zero, sa);
    };
    const auto sums = w >= 9 ? step(vd{}) : step(vec{});
    const vec z = sums.z;
    if (!GRAD) {
      for (int l = 0; l < V; ++l)
        if (t < len[l]) {
          ok[l] = ok[l] && z[l] > 0 && std::isfinite(double(z[l]));
          mean[l * n + t] = sums.M[l] / z[l];
          bound[l] += double(W.cm[t][l]) * double(sa[l]) / double(z[l]);  // flushed in b_{t-1}, weighted by a_{t-1}
        }
    } else {
      project(W.f.data(), w - 1, W.P.data());  // the bits other than p, renumbered q -> q - (q > p)
      const vec Mt = project(W.ft.data(), w - 1, W.Pt.data());  // the tangent of M
      for (int l = 0; l < V; ++l) {
        if (!(live[l] && t < len[l])) continue;
        const double zl = z[l], ztl = sums.zt[l], m_ = sums.M[l] / zl, g = double(glz[l]) * beta;
        gh[l * n + t] = T((Mt[l] - m_ * ztl) / zl + g * m_);
        for (int q = 0; q < w; ++q) {
          int d = ((p - q) % w + w) % w;
          if (d == 0) d = w;
          if (t - d < 0) continue;  // a coupling to a free spin before the chain: not a parameter
          const double Pq = q == p ? sums.P[l] : W.P[q - (q > p)][l];
          const double Ptq = q == p ? sums.Pt[l] : W.Pt[q - (q > p)][l];
          const double C = Pq / zl;
          gB[(int64_t)t * w + (w - d)] += (Ptq - C * ztl) / zl + g * C;
        }
      }
    }
    for (int l = 0; l < V; ++l) zb[l] = double(z[l]) / double(sa[l]);
    mbb = sums.mb;
    for (int l = 0; l < V; ++l) {
      int e;
      bool good = true;
      sb[l] = pow2_scale(sums.mb[l], &e, &good);
      if (t < len[l] && t > 0) ok[l] = ok[l] && good;
    }
    std::swap(W.b, W.nb);
    b = W.b.data();
    if (GRAD) {
      std::swap(W.bt, W.nbt);
      bt = W.bt.data();
    }
  }
  if (!GRAD)
    for (int l = 0; l < V; ++l) {
      for (int t = len[l]; t < n; ++t) mean[l * n + t] = 0;
      lost[l] = ok[l] ? std::log(16.0 * S * tiny * bound[l]) : std::numeric_limits<double>::infinity();
      if (!ok[l]) log_z[l] = std::numeric_limits<double>::quiet_NaN();
    }
}

struct Shapes {
  int64_t R, n, G, w;
};

ffi::Error check(ffi::AnyBuffer h, ffi::AnyBuffer jw, ffi::AnyBuffer lengths, Shapes* s) {
  auto hd = h.dimensions(), jd = jw.dimensions(), ld = lengths.dimensions();
  if (hd.size() != 2 || jd.size() != 3 || ld.size() != 1)
    return ffi::Error::InvalidArgument("banded_native: expected h [R, n], jw [G, n, w], lengths [R]");
  s->R = hd[0], s->n = hd[1], s->G = jd[0], s->w = jd[2];
  if (jd[1] != s->n || ld[0] != s->R || s->G < 1 || s->R % s->G != 0 || s->w < 1 || s->w > 16 || s->n < 1)
    return ffi::Error::InvalidArgument("banded_native: inconsistent shapes (rows must be a multiple of groups)");
  if (lengths.element_type() != ffi::DataType::S32)
    return ffi::Error::InvalidArgument("banded_native: lengths must be int32");
  const int32_t* len = lengths.typed_data<int32_t>();
  for (int64_t i = 0; i < s->R; ++i)
    if (len[i] < 1 || len[i] > s->n) return ffi::Error::InvalidArgument("banded_native: a row length is out of range");
  return ffi::Error::Success();
}

// The work of one call, shared by the threads that run it. Units: the blocks of V rows of a group, dealt to
// a fixed number of slices per group (block b to slice b mod NS), each slice summing its own gradient of
// jw: the result does not depend on how many threads run the slices or in which order.
template <typename T, bool GRAD>
struct Job {
  const T *h, *jw, *gm, *glz;
  const int32_t* lens;
  T beta;
  int n, w, NS;
  int64_t G, per, nblk;
  T *mean, *log_z, *lost, *gh;
  std::vector<double> gB;  // [G][NS][n][w]
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  int64_t done = 0;
  int64_t units() const { return G * NS; }
};

// Claim units until none is left. A thread that starts after the last claim returns without touching the
// call's buffers (the Job outlives the call: the tasks own it too).
template <typename T, bool GRAD>
void drain(Job<T, GRAD>& J) {
  const int n = J.n, w = J.w, S = 1 << w;
  std::unique_ptr<Work<T>> W;
  std::vector<T> K, out_rows;
  std::vector<double> shift;
  int64_t cur = -1;
  for (;;) {
    const int64_t u = J.next.fetch_add(1);
    if (u >= J.units()) return;
    if (!W) {
      W.reset(new Work<T>(n, w, GRAD));
      K.resize((int64_t)n * 2 * S), out_rows.resize((int64_t)V * n), shift.resize(n);
    }
    const int64_t g = u / J.NS;
    if (g != cur) build_tables(J.jw + g * n * w, n, w, J.beta, K.data(), shift.data()), cur = g;
    double* gB = GRAD ? J.gB.data() + u * n * w : nullptr;
    for (int64_t blk = u % J.NS; blk < J.nblk; blk += J.NS) {
      const int64_t i0 = g * J.per + blk * V, end = (g + 1) * J.per;
      int len[V], L = 0;
      bool live[V];
      T glzb[V];
      double lz[V], ls[V];
      for (int l = 0; l < V; ++l) {
        const int64_t i = i0 + l;
        live[l] = i < end;
        len[l] = live[l] ? J.lens[i] : 1;
        L = std::max(L, len[l]);
      }
      for (int l = 0; l < V; ++l) {  // the block reads spins t < L only
        const int64_t i = i0 + l;
        glzb[l] = GRAD && live[l] ? J.glz[i] : T(0);
        for (int t = 0; t < L; ++t) {
          const T bh = live[l] ? J.beta * J.h[i * n + t] : T(0);
          W->bh[t][l] = bh;
          W->u[t][l] = std::exp(-2 * std::abs(bh));
          if (GRAD) W->bg[t][l] = live[l] ? J.beta * J.gm[i * n + t] : T(0);
        }
        if (GRAD && live[l]) {  // a row without a cotangent adds nothing (and may be one whose messages failed)
          bool on = glzb[l] != 0;
          for (int t = 0; t < n && !on; ++t) on = J.gm[i * n + t] != 0;
          live[l] = on;
        }
      }
      std::fill(out_rows.begin(), out_rows.end(), T(0));
      block<T, GRAD>(*W, len, live, K.data(), J.beta, out_rows.data(), lz, ls, glzb, out_rows.data(), gB);
      for (int l = 0; l < V && i0 + l < end; ++l) {
        const int64_t i = i0 + l;
        std::copy(out_rows.begin() + l * n, out_rows.begin() + (l + 1) * n, (GRAD ? J.gh : J.mean) + i * n);
        if (!GRAD) {
          double sh = 0;
          for (int t = 0; t < len[l]; ++t) sh += shift[t];
          J.log_z[i] = T(lz[l] + sh);
          J.lost[i] = T(ls[l]);
        }
      }
    }
    std::lock_guard<std::mutex> lock(J.mu);
    if (++J.done == J.units()) J.cv.notify_all();
  }
}

constexpr int kSlices = 16;  // per group: enough to keep the threads of a CPU's pool evenly busy

// Rows of every group in blocks of V, over XLA's intra-op threads (the calling thread takes part).
template <typename T, bool GRAD>
ffi::Error run(ffi::ThreadPool pool, ffi::AnyBuffer h, ffi::AnyBuffer jw, ffi::AnyBuffer beta_b,
               ffi::AnyBuffer lengths, const T* gm, const T* glz, T* mean, T* log_z, T* lost, T* gh, T* gjw) {
  Shapes s;
  if (auto e = check(h, jw, lengths, &s); e.failure()) return e;
  auto job = std::make_shared<Job<T, GRAD>>();
  Job<T, GRAD>& J = *job;
  J.h = h.typed_data<T>(), J.jw = jw.typed_data<T>(), J.gm = gm, J.glz = glz, J.lens = lengths.typed_data<int32_t>();
  J.beta = beta_b.typed_data<T>()[0];
  J.n = int(s.n), J.w = int(s.w), J.G = s.G, J.per = s.R / s.G, J.nblk = (J.per + V - 1) / V;
  J.NS = int(std::min<int64_t>(J.nblk, kSlices));
  J.mean = mean, J.log_z = log_z, J.lost = lost, J.gh = gh;
  const int64_t nw = (int64_t)J.n * J.w;
  if (GRAD) J.gB.assign(J.units() * nw, 0.0);
  const int64_t threads = std::min<int64_t>(std::max<int64_t>(pool.num_threads(), 1), J.units());
  for (int64_t i = 1; i < threads; ++i) pool.Schedule([job] { drain(*job); });
  drain(J);
  {
    std::unique_lock<std::mutex> lock(J.mu);
    J.cv.wait(lock, [&] { return J.done == J.units(); });
  }
  if (GRAD)
    for (int64_t g = 0; g < J.G; ++g)
      for (int64_t k = 0; k < nw; ++k) {
        double sum = 0;
        for (int sl = 0; sl < J.NS; ++sl) sum += J.gB[(g * J.NS + sl) * nw + k];
        gjw[g * nw + k] = T(sum);
      }
  return ffi::Error::Success();
}

template <typename T>
ffi::Error forward(ffi::ThreadPool pool, ffi::AnyBuffer h, ffi::AnyBuffer jw, ffi::AnyBuffer beta,
                   ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> mean, ffi::Result<ffi::AnyBuffer> log_z,
                   ffi::Result<ffi::AnyBuffer> lost) {
  return run<T, false>(pool, h, jw, beta, lengths, nullptr, nullptr, mean->typed_data<T>(), log_z->typed_data<T>(),
                       lost->typed_data<T>(), nullptr, nullptr);
}

template <typename T>
ffi::Error backward(ffi::ThreadPool pool, ffi::AnyBuffer h, ffi::AnyBuffer jw, ffi::AnyBuffer beta,
                    ffi::AnyBuffer lengths, ffi::AnyBuffer gm, ffi::AnyBuffer glz, ffi::Result<ffi::AnyBuffer> gh,
                    ffi::Result<ffi::AnyBuffer> gjw) {
  return run<T, true>(pool, h, jw, beta, lengths, gm.typed_data<T>(), glz.typed_data<T>(), nullptr, nullptr, nullptr,
                      gh->typed_data<T>(), gjw->typed_data<T>());
}

}  // namespace

#define ISINGATTN_FORWARD(NAME, T)                                                           \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, forward<T>,                                              \
                                ffi::Ffi::Bind()                                               \
                                    .Ctx<ffi::ThreadPool>()                                    \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Ret<ffi::AnyBuffer>()                                     \
                                    .Ret<ffi::AnyBuffer>()                                     \
                                    .Ret<ffi::AnyBuffer>());
#define ISINGATTN_BACKWARD(NAME, T)                                                          \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, backward<T>,                                             \
                                ffi::Ffi::Bind()                                               \
                                    .Ctx<ffi::ThreadPool>()                                    \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Arg<ffi::AnyBuffer>()                                     \
                                    .Ret<ffi::AnyBuffer>()                                     \
                                    .Ret<ffi::AnyBuffer>());

ISINGATTN_FORWARD(isingattn_banded_fwd_f32, float)
ISINGATTN_FORWARD(isingattn_banded_fwd_f64, double)
ISINGATTN_BACKWARD(isingattn_banded_bwd_f32, float)
ISINGATTN_BACKWARD(isingattn_banded_bwd_f64, double)
