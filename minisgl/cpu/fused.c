/* The elementwise work of a decoder layer, and decode attention, as one C call each (fp32, CPU).
 *
 * In eager PyTorch a decode step of a small model is mostly operator calls, not arithmetic: RoPE
 * is ~15 small tensor ops per layer, RMSNorm with its residual add 6, attention over a paged KV
 * cache (gather, mask, SDPA, scatter back) ~15, each a few microseconds of dispatch for a few
 * hundred numbers. These functions do each job in one pass, as the Triton kernels of
 * minisgl/kernel/triton/ do on CUDA (chapter 10), and compute what the torch code computes, in
 * fp32, up to the order of the sums. Work is split over OpenMP threads (PyTorch's own runtime).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

/* x[i] = e^x[i] for n values. libm's expf is one value per call, and SiLU and softmax each need
 * one per element (SiLU alone took 0.23 ms of SmolLM2's 7.8 ms 4-bit decode step). With AVX2, 8 at
 * a time: x = k ln2 + r with |r| <= ln2 / 2, e^r by Cephes' degree-6 polynomial (within 2 ulp of
 * expf), 2^k written straight into the float's exponent bits. Inputs are clamped to [-87, 88],
 * where e^x is a normal float (e^-87 ~ 1.6e-38: what SiLU and softmax make of less is 0 all the
 * same); a NaN stays NaN (max / min return their second operand when one is NaN). */
static void exp_in_place(float *x, int64_t n) {
    int64_t i = 0;
#ifdef __AVX2__
    const float coefficients[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                  4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        v = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), v));
        __m256 k = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        /* r = v - k ln2, with ln2 split in two parts so the product loses no bits */
        __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), v);
        r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
        __m256 p = _mm256_set1_ps(coefficients[0]);
        for (int c = 1; c < 6; c++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(coefficients[c]));
        p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f)); /* 1 + r + r^2 p */
        __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
        _mm256_storeu_ps(x + i, _mm256_mul_ps(p, _mm256_castsi256_ps(two_k)));
    }
#endif
    for (; i < n; i++) x[i] = expf(x[i]);
}

/* out[i] = table[ids[i]] (rows `table_stride` floats apart) for `count` ids, `dim` values each. An id
 * outside [0, rows) gets a row of zeros; returns how many there were (the caller raises). */
int embedding(const float *table, int64_t table_stride, int64_t rows, const int64_t *ids, float *out, int count,
              int dim) {
    int refused = 0;
    for (int i = 0; i < count; i++) {
        float *y = out + (int64_t)i * dim;
        if (ids[i] < 0 || ids[i] >= rows) {
            memset(y, 0, (size_t)dim * sizeof(float));
            refused++;
        } else {
            memcpy(y, table + ids[i] * table_stride, (size_t)dim * sizeof(float));
        }
    }
    return refused;
}

/* summed = x + residual (when residual is not NULL; else summed is x itself), then
 * out = summed / sqrt(mean(summed^2) + eps) * weight, for each of `rows` rows of `dim` values.
 * x and residual rows are `x_stride` / `residual_stride` floats apart; out and summed are dense. */
void rms_norm(const float *x, int64_t x_stride, const float *residual, int64_t residual_stride, const float *weight,
              float eps, float *out, float *summed, int rows, int dim, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 8)
    for (int r = 0; r < rows; r++) {
        const float *in = x + (int64_t)r * x_stride;
        float *stream = residual ? summed + (int64_t)r * dim : (float *)in;
        float squares = 0.0f;
        if (residual) {
            const float *add = residual + (int64_t)r * residual_stride;
#pragma omp simd reduction(+ : squares)
            for (int j = 0; j < dim; j++) {
                stream[j] = in[j] + add[j];
                squares += stream[j] * stream[j];
            }
        } else {
#pragma omp simd reduction(+ : squares)
            for (int j = 0; j < dim; j++) squares += in[j] * in[j];
        }
        float inverse_rms = 1.0f / sqrtf(squares / (float)dim + eps);
        float *y = out + (int64_t)r * dim;
#pragma omp simd
        for (int j = 0; j < dim; j++) y[j] = stream[j] * inverse_rms * weight[j];
    }
}

/* Rotate-half RoPE: for each token t and head, pair (v[i], v[i + d/2]) turns by the angle whose
 * cos and sin are cos_sin[positions[t]] = [cos (d/2 values) | sin (d/2 values)]. Input heads are
 * `head_dim` apart within a token, tokens `token_stride` apart (q and k are views into qkv);
 * the output is dense [tokens, heads, head_dim]. */
static void rotate(const float *in, int64_t token_stride, int heads, const int64_t *positions, const float *cos_sin,
                   float *out, int tokens, int head_dim, int threads) {
    int half = head_dim / 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (tokens > 8)
    for (int t = 0; t < tokens; t++) {
        const float *cos = cos_sin + positions[t] * head_dim, *sin = cos + half;
        for (int h = 0; h < heads; h++) {
            const float *v = in + t * token_stride + (int64_t)h * head_dim;
            float *y = out + ((int64_t)t * heads + h) * head_dim;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                y[i] = v[i] * cos[i] - v[i + half] * sin[i];
                y[i + half] = v[i + half] * cos[i] + v[i] * sin[i];
            }
        }
    }
}

void rope(const float *q, int64_t q_stride, int q_heads, const float *k, int64_t k_stride, int k_heads,
          const int64_t *positions, const float *cos_sin, float *q_out, float *k_out, int tokens, int head_dim,
          int threads) {
    rotate(q, q_stride, q_heads, positions, cos_sin, q_out, tokens, head_dim, threads);
    rotate(k, k_stride, k_heads, positions, cos_sin, k_out, tokens, head_dim, threads);
}

/* out [rows, half] = silu(gate) * up, for gate_up [rows, 2 * half] = [gate | up] per row. */
void silu_and_mul(const float *gate_up, float *out, int rows, int half, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 8)
    for (int r = 0; r < rows; r++) {
        const float *gate = gate_up + (int64_t)r * 2 * half, *up = gate + half;
        float *y = out + (int64_t)r * half;
        for (int j = 0; j < half; j++) y[j] = -gate[j];
        exp_in_place(y, half);
        for (int j = 0; j < half; j++) y[j] = gate[j] / (1.0f + y[j]) * up[j];
    }
}

/* Key and value rows sit at whatever slots the page table handed out, so the hardware prefetcher
 * cannot guess the next one; the loops below ask for the row they reach PREFETCH_KEYS keys later.
 * That took a fifth of the C attention time away on the AVX2 EPYC (interleaved runs of SmolLM2's
 * 30 layers at a 100-token context: median 1.35 -> 1.06 ms per step). */
#define PREFETCH_KEYS 8

static inline void prefetch_row(const void *row, int bytes) {
    for (int b = 0; b < bytes; b += 64) __builtin_prefetch((const char *)row + b); /* one 64-byte line each */
}

/* The keys and values of one request and one KV head: row t of either cache starts at element
 * slots[t] * row_stride + offset, `length` rows of `head_dim` values. */
typedef struct {
    const int64_t *slots;
    int64_t length, row_stride, offset;
    int head_dim;
} HeadRows;

/* A cache holds fp32 values, or bf16 ones (`--kv-cache-dtype bfloat16`: half the bytes to store and
 * to read back, each value rounded once when stored). Reading widens bf16 to fp32 exactly (a bf16
 * is the top half of an fp32), so all arithmetic below is fp32 either way. The helpers take `bf16`
 * as a constant from `attend_head`'s two inlined copies, so neither copy branches per value. */
static inline const void *head_row(const void *cache, const HeadRows *rows, int64_t t, int bf16) {
    int64_t index = rows->slots[t] * rows->row_stride + rows->offset;
    return bf16 ? (const void *)((const uint16_t *)cache + index) : (const void *)((const float *)cache + index);
}

static inline float load_value(const void *row, int64_t j, int bf16) {
    if (!bf16) return ((const float *)row)[j];
    uint32_t bits = (uint32_t)((const uint16_t *)row)[j] << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

#ifdef __AVX2__
static inline __m256 load_values8(const void *row, int64_t j, int bf16) { /* values j .. j + 7 */
    if (!bf16) return _mm256_loadu_ps((const float *)row + j);
    __m128i halves = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + j));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}
#endif

/* x rounded to the nearest bf16, ties to even, as torch's float -> bfloat16 conversion; a NaN
 * becomes the quiet NaN 0x7FC0 (torch's scalar conversion gives that one, its vector ones others). */
static inline uint16_t bf16_bits(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

/* scores[r, t] = scale * queries[r] . key t for the `group` query heads [group, head_dim] that share
 * these keys; scores [group, length]. With AVX2 and head_dim a multiple of 8, four keys at a time:
 * each query load serves four independent FMA chains, and one hadd tree sums the four dots, where
 * a loop per dot waits on its one chain and sums its lanes alone (with `weighted_values` below:
 * 32 requests x 30 SmolLM2 layers, warm cache, 12.6 -> 5.8 ms on 2 AVX2 cores). */
static inline __attribute__((always_inline)) void attention_scores(const float *queries, int group, const void *k_cache,
                                                                   const HeadRows *rows, float scale, float *scores,
                                                                   int bf16) {
    int64_t length = rows->length, t = 0;
    int head_dim = rows->head_dim, row_bytes = head_dim * (bf16 ? 2 : 4);
#ifdef __AVX2__
    if (head_dim % 8 == 0) {
        for (; t + 4 <= length; t += 4) {
            const void *keys[4];
            for (int u = 0; u < 4; u++) {
                if (t + u + PREFETCH_KEYS < length)
                    prefetch_row(head_row(k_cache, rows, t + u + PREFETCH_KEYS, bf16), row_bytes);
                keys[u] = head_row(k_cache, rows, t + u, bf16);
            }
            for (int r = 0; r < group; r++) {
                const float *query = queries + (int64_t)r * head_dim;
                __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
                for (int j = 0; j < head_dim; j += 8) {
                    __m256 query_part = _mm256_loadu_ps(query + j);
                    for (int u = 0; u < 4; u++)
                        acc[u] = _mm256_fmadd_ps(query_part, load_values8(keys[u], j, bf16), acc[u]);
                }
                /* [a b c d] of 8 lanes each -> [sum a, sum b, sum c, sum d] */
                __m256 pairs = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
                __m128 dots = _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
                _mm_storeu_ps(scores + r * length + t, _mm_mul_ps(dots, _mm_set1_ps(scale)));
            }
        }
    }
#endif
    for (; t < length; t++) { /* the portable path, and the last keys of the AVX2 one */
        if (t + PREFETCH_KEYS < length) prefetch_row(head_row(k_cache, rows, t + PREFETCH_KEYS, bf16), row_bytes);
        const void *key = head_row(k_cache, rows, t, bf16);
        for (int r = 0; r < group; r++) {
            const float *query = queries + (int64_t)r * head_dim;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < head_dim; j++) dot += query[j] * load_value(key, j, bf16);
            scores[r * length + t] = dot * scale;
        }
    }
}

/* y[r] = sum_t weights[r, t] * value t for the `group` query heads; y [group, head_dim], weights
 * [group, length]. With AVX2 and head_dim a multiple of 32, each head's output is summed 32 floats
 * at a time in four registers over all values (the values of one request stay in L1 after the first
 * head's pass), instead of a load and a store of y per value. */
static inline __attribute__((always_inline)) void weighted_values(const float *weights, int group, const void *v_cache,
                                                                  const HeadRows *rows, float *y, int bf16) {
    int64_t length = rows->length;
    int head_dim = rows->head_dim, row_bytes = head_dim * (bf16 ? 2 : 4);
#ifdef __AVX2__
    if (head_dim % 32 == 0) {
        for (int r = 0; r < group; r++) {
            const float *head_weights = weights + r * length;
            for (int j = 0; j < head_dim; j += 32) {
                __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
                for (int64_t t = 0; t < length; t++) {
                    if (r == 0 && j == 0 && t + PREFETCH_KEYS < length)
                        prefetch_row(head_row(v_cache, rows, t + PREFETCH_KEYS, bf16), row_bytes);
                    const void *value = head_row(v_cache, rows, t, bf16);
                    __m256 weight = _mm256_set1_ps(head_weights[t]);
                    for (int c = 0; c < 4; c++)
                        acc[c] = _mm256_fmadd_ps(weight, load_values8(value, j + 8 * c, bf16), acc[c]);
                }
                for (int c = 0; c < 4; c++) _mm256_storeu_ps(y + (int64_t)r * head_dim + j + 8 * c, acc[c]);
            }
        }
        return;
    }
#endif
    for (int64_t i = 0; i < (int64_t)group * head_dim; i++) y[i] = 0.0f;
    for (int64_t t = 0; t < length; t++) {
        if (t + PREFETCH_KEYS < length) prefetch_row(head_row(v_cache, rows, t + PREFETCH_KEYS, bf16), row_bytes);
        const void *value = head_row(v_cache, rows, t, bf16);
        for (int r = 0; r < group; r++) {
            float weight = weights[r * length + t];
            float *y_head = y + (int64_t)r * head_dim;
#pragma omp simd
            for (int j = 0; j < head_dim; j++) y_head[j] += weight * load_value(value, j, bf16);
        }
    }
}

/* Attention of the `group` query heads [group, head_dim] that share the KV head of `rows`:
 * y [group, head_dim] = softmax(scores) V. */
static inline __attribute__((always_inline)) void attend_head(const float *queries, int group, const void *k_cache,
                                                              const void *v_cache, const HeadRows *rows, float scale,
                                                              float *y, int bf16) {
    int64_t length = rows->length;
    float *scores = malloc((size_t)group * length * sizeof(float)); /* [group, length] */
    attention_scores(queries, group, k_cache, rows, scale, scores, bf16);
    for (int r = 0; r < group; r++) { /* softmax of each query head's scores */
        float *row = scores + r * length, best = -INFINITY, total = 0.0f;
        /* a comparison, not fmaxf: the same maximum (a NaN score is passed over either way),
           but fmaxf's NaN rules made it a call into libm per score */
        for (int64_t t = 0; t < length; t++) best = row[t] > best ? row[t] : best;
        for (int64_t t = 0; t < length; t++) row[t] -= best; /* minus the max: no overflow */
        exp_in_place(row, length);
        for (int64_t t = 0; t < length; t++) total += row[t];
        for (int64_t t = 0; t < length; t++) row[t] /= total;
    }
    weighted_values(scores, group, v_cache, rows, y, bf16);
    free(scores);
}

/* Row i of `x` (`stride` floats apart, `count` values) into `cache` at element `at`: copied to an
 * fp32 cache, rounded to a bf16 one. */
static void store_row(const float *x, void *cache, int64_t at, int64_t count, int bf16) {
    if (!bf16) {
        memcpy((float *)cache + at, x, count * sizeof(float));
        return;
    }
    uint16_t *out = (uint16_t *)cache + at;
    for (int64_t j = 0; j < count; j++) out[j] = bf16_bits(x[j]);
}

/* One query token per request (a decode step). First the step's new keys and values go into the
 * cache: row i of k_new / v_new (`new_stride` floats apart, heads dense within a row) into cache
 * slot new_slots[i]. Then out[i, h] = softmax(q[i, h] . K_i^T * scale) V_i, where K_i, V_i are the
 * rows k_cache[slots[i, t]], t < lengths[i], of KV head h / group (the query heads of a group share
 * one KV head). q, out [reqs, q_heads, head_dim]; caches [cache_slots, kv_heads, head_dim], fp32,
 * or bf16 where kv_bf16 is not 0; slots [reqs, slots_stride]. */
void decode_attention(const float *q, const float *k_new, int64_t k_new_stride, const float *v_new,
                      int64_t v_new_stride, const int64_t *new_slots, void *k_cache, void *v_cache, int kv_bf16,
                      const int64_t *slots, int64_t slots_stride, const int64_t *lengths, float *out, int reqs,
                      int q_heads, int kv_heads, int head_dim, float scale, int threads) {
    int group = q_heads / kv_heads;
    int64_t cache_row = (int64_t)kv_heads * head_dim; /* values per slot */
    for (int i = 0; i < reqs; i++) {
        store_row(k_new + i * k_new_stride, k_cache, new_slots[i] * cache_row, cache_row, kv_bf16);
        store_row(v_new + i * v_new_stride, v_cache, new_slots[i] * cache_row, cache_row, kv_bf16);
    }
    /* One task per (request, KV head): each key and value row is read once for all `group` query
     * heads that share it, not once per query head. */
#pragma omp parallel for num_threads(threads) schedule(dynamic) collapse(2)
    for (int i = 0; i < reqs; i++) {
        for (int g = 0; g < kv_heads; g++) {
            HeadRows rows = {slots + i * slots_stride, lengths[i], cache_row, (int64_t)g * head_dim, head_dim};
            int64_t first = (int64_t)i * q_heads + (int64_t)g * group; /* the group's first query head */
            const float *queries = q + first * head_dim;                /* [group, head_dim] */
            if (kv_bf16)
                attend_head(queries, group, k_cache, v_cache, &rows, scale, out + first * head_dim, 1);
            else
                attend_head(queries, group, k_cache, v_cache, &rows, scale, out + first * head_dim, 0);
        }
    }
}

/* out[r] = the index of the largest of x[r, 0..cols), the first one on a tie, a NaN counting as
 * larger than any number (as torch.argmax): greedy decoding's pick from the logits, rows over
 * threads. torch.argmax took 3.2 ms for a batch of 32 SmolLM2 rows (32 x 49,152) on 2 cores; this
 * reads them at memory speed. Two passes per row: the maximum (8 lanes at a time), then the first
 * index holding it (the row is in cache by then). */
void argmax_rows(const float *x, int64_t stride, int rows, int cols, int64_t *out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *row = x + (int64_t)r * stride;
        float best = -INFINITY;
        int has_nan = 0, j = 0;
#ifdef __AVX2__
        __m256 lanes = _mm256_set1_ps(-INFINITY), nan_lanes = _mm256_setzero_ps();
        for (; j + 8 <= cols; j += 8) {
            __m256 v = _mm256_loadu_ps(row + j);
            lanes = _mm256_max_ps(v, lanes); /* max_ps keeps `lanes` where v is NaN */
            nan_lanes = _mm256_or_ps(nan_lanes, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        float partial[8];
        _mm256_storeu_ps(partial, lanes);
        for (int l = 0; l < 8; l++) best = partial[l] > best ? partial[l] : best;
        has_nan = _mm256_movemask_ps(nan_lanes) != 0;
#endif
        for (; j < cols; j++) {
            best = row[j] > best ? row[j] : best;
            has_nan |= isnan(row[j]);
        }
        int64_t pick = 0;
        for (int64_t i = 0; i < cols; i++)
            if (has_nan ? isnan(row[i]) : row[i] == best) {
                pick = i;
                break;
            }
        out[r] = pick;
    }
}
