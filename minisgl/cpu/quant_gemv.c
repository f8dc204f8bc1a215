/* Quantized matrix-vector products for CPU decode steps (chapter 16, "Multiplying the blocks").
 *
 * A decode step of a few rows reads every weight once, so its speed is bytes per weight. These
 * kernels read GGUF's own blocks of 32 weights: Q4_1 (a 4-bit code per weight, one scale d and one
 * minimum m per block: w = d * q + m) and Q8_0 (an 8-bit code, one scale: w = d * q). They multiply
 * in integers, as llama.cpp's ggml_vec_dot_q4_1_q8_1 does, but with 16-bit activations where
 * llama.cpp rounds them to 8 bits: each block of 32 activations becomes int16 codes with its own
 * scale (x ~ dx * qx, |qx| <= 32767), and a block's dot product is the integer sum of qw * qx,
 * scaled once:
 *
 *     sum_j w_j x_j  ~  d * dx * sum_j qw_j qx_j  +  m * sum_j x_j          (Q4_1)
 *     sum_j w_j x_j  ~  d * dx * sum_j qw_j qx_j                             (Q8_0)
 *
 * m multiplies the exact sum of the block's activations, so the only new rounding is x's, at most
 * half a step of max|x| / 32767 per activation (8-bit activations moved a small model's logits by
 * 8 % of their range; 16-bit ones cost the same time, the same number of instructions per block). With
 * AVX2, _mm256_madd_epi16 multiplies 16 code pairs and adds them in pairs; other CPUs take the
 * plain loops, which the compiler vectorizes as it can. Output rows are split over OpenMP threads,
 * the runtime PyTorch's own CPU kernels use (libgomp), so no second thread pool competes.
 *
 * Layouts (row-major, `in` a multiple of 32, any number of activation rows, taken MAX_ROWS at a time):
 *   q4 codes [out, in / 2] uint8: per block, byte j holds weight j (low nibble) and 16 + j (high)
 *   q8 codes [out, in] int8;  scale, minimum [out, in / 32] float;  x [rows, in];  y [rows, out]
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define BLOCK 32
#define MAX_ROWS 8
/* How far ahead of the block being multiplied its weight row is fetched into cache. The hardware
 * prefetchers alone left about a tenth of the speed on the table on the AVX2 EPYC this was first
 * tuned on (interleaved runs of the 30 SmolLM2 layers at 1 row: median 7.3 -> 6.3 ms; its Q8_0 LM
 * head: 2.0 -> 1.7 ms). A thread's rows follow each other in memory, and a row of 576 inputs is only
 * 288 bytes of 4-bit codes (576 of 8-bit ones), so the distance reaches into the rows after it:
 * on 2 cores of an AMX Xeon, whose memory is further away, 2 KiB ahead instead of 384 bytes took
 * the layers from 9.7 to 8.5 ms, and 4 KiB instead of 1 KiB the head from 1.73 to 1.31 ms (medians
 * of 11 and 15, alternated, from memory). A prefetch past the end of the array is harmless:
 * prefetches never fault. */
#define PREFETCH_Q4_BLOCKS 128 /* 2 KiB of codes */
#define PREFETCH_Q8_BLOCKS 128 /* 4 KiB of codes */

/* x [rows, in] -> codes [rows, in] int16 and, per block, its scale and the exact sum of its values */
static void quantize_activations(const float *x, int rows, int in, int16_t *codes, float *scale, float *sum) {
    for (int b = 0; b < rows * in / BLOCK; b++) {
        const float *block = x + (int64_t)b * BLOCK;
        float amax = 0.0f, total = 0.0f;
        for (int j = 0; j < BLOCK; j++) {
            amax = fmaxf(amax, fabsf(block[j]));
            total += block[j];
        }
        float d = amax / 32767.0f;
        float inverse = d > 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < BLOCK; j++) codes[(int64_t)b * BLOCK + j] = (int16_t)lrintf(block[j] * inverse);
        scale[b] = d;
        sum[b] = total;
    }
}

#ifdef __AVX2__
static inline float horizontal_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the 32 int16 products w * x of one block, summed in pairs (vpmaddwd) to 8 int32 -> float */
static inline __m256 dot_block(__m256i w_first, __m256i w_second, const int16_t *x) {
    __m256i first = _mm256_madd_epi16(w_first, _mm256_loadu_si256((const __m256i *)x));
    __m256i second = _mm256_madd_epi16(w_second, _mm256_loadu_si256((const __m256i *)(x + 16)));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(first, second));
}
#endif

/* Two output columns (weight rows codes0, d0, m0 and codes1, d1, m1) for every activation row:
 * out[r][0..1] = y[r, n..n + 1]. The two weight rows share each activation load and keep two
 * independent FMA chains in flight. `rows` is a compile-time constant at each call (see the
 * switches below), so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void q4_1_pair(const uint8_t *codes0, const float *d0, const float *m0,
                                                            const uint8_t *codes1, const float *d1, const float *m1,
                                                            const int16_t *xq, const float *xd,
                                                            const float *xsum, const int rows, int blocks,
                                                            float out[][2]) {
    for (int r = 0; r < rows; r++) { /* the minimum's share: m * (exact sum of the block's activations) */
        float offset0 = 0.0f, offset1 = 0.0f;
        /* simd: let the sums be reordered into vector lanes (a serial chain of FMAs took as long as the
           integer dot products themselves) */
#pragma omp simd reduction(+ : offset0, offset1)
        for (int b = 0; b < blocks; b++) {
            offset0 += m0[b] * xsum[(int64_t)r * blocks + b];
            offset1 += m1[b] * xsum[(int64_t)r * blocks + b];
        }
        out[r][0] = offset0;
        out[r][1] = offset1;
    }
#ifdef __AVX2__
    __m256 acc0[MAX_ROWS], acc1[MAX_ROWS];
    for (int r = 0; r < rows; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    const __m256i low_nibble = _mm256_set1_epi16(0x0F);
    for (int b = 0; b < blocks; b++) {
        if (b % 4 == 0) { /* one 64-byte line holds 4 blocks of codes */
            _mm_prefetch((const char *)(codes0 + (int64_t)(b + PREFETCH_Q4_BLOCKS) * 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(codes1 + (int64_t)(b + PREFETCH_Q4_BLOCKS) * 16), _MM_HINT_T0);
        }
        /* 16 bytes -> 16 int16 lanes; the low nibbles are weights 0..15, the high ones 16..31 */
        __m256i bytes0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(codes0 + (int64_t)b * 16)));
        __m256i bytes1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(codes1 + (int64_t)b * 16)));
        __m256i first0 = _mm256_and_si256(bytes0, low_nibble), second0 = _mm256_srli_epi16(bytes0, 4);
        __m256i first1 = _mm256_and_si256(bytes1, low_nibble), second1 = _mm256_srli_epi16(bytes1, 4);
        for (int r = 0; r < rows; r++) {
            int64_t xb = (int64_t)r * blocks + b;
            const int16_t *x = xq + xb * BLOCK;
            acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(d0[b] * xd[xb]), dot_block(first0, second0, x), acc0[r]);
            acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(d1[b] * xd[xb]), dot_block(first1, second1, x), acc1[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        out[r][0] += horizontal_sum(acc0[r]);
        out[r][1] += horizontal_sum(acc1[r]);
    }
#else
    for (int r = 0; r < rows; r++) {
        for (int half = 0; half < 2; half++) {
            const uint8_t *codes = half ? codes1 : codes0;
            const float *d = half ? d1 : d0;
            for (int b = 0; b < blocks; b++) {
                int64_t xb = (int64_t)r * blocks + b;
                const uint8_t *block = codes + (int64_t)b * 16;
                const int16_t *x = xq + xb * BLOCK;
                int32_t dot = 0;
                for (int j = 0; j < 16; j++) dot += (block[j] & 0x0F) * x[j] + (block[j] >> 4) * x[16 + j];
                out[r][half] += d[b] * xd[xb] * (float)dot;
            }
        }
    }
#endif
}

static inline __attribute__((always_inline)) void q8_0_row(const int8_t *codes, const float *d, const int16_t *xq,
                                                           const float *xd, const int rows, int blocks, float *out) {
#ifdef __AVX2__
    __m256 acc[2][MAX_ROWS];
    for (int r = 0; r < rows; r++) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const int8_t *block = codes + (int64_t)b * BLOCK;
        if (b % 2 == 0) _mm_prefetch((const char *)(block + PREFETCH_Q8_BLOCKS * BLOCK), _MM_HINT_T0); /* 2 per line */
        __m256i first = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)block));
        __m256i second = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(block + 16)));
        for (int r = 0; r < rows; r++) {
            int64_t xb = (int64_t)r * blocks + b;
            acc[b & 1][r] = _mm256_fmadd_ps(_mm256_set1_ps(d[b] * xd[xb]), dot_block(first, second, xq + xb * BLOCK),
                                            acc[b & 1][r]);
        }
    }
    for (int r = 0; r < rows; r++) out[r] = horizontal_sum(_mm256_add_ps(acc[0][r], acc[1][r]));
#else
    for (int r = 0; r < rows; r++) {
        float total = 0.0f;
        for (int b = 0; b < blocks; b++) {
            int64_t xb = (int64_t)r * blocks + b;
            const int8_t *w = codes + (int64_t)b * BLOCK;
            const int16_t *x = xq + xb * BLOCK;
            int32_t dot = 0;
            for (int j = 0; j < BLOCK; j++) dot += w[j] * x[j];
            total += d[b] * xd[xb] * (float)dot;
        }
        out[r] = total;
    }
#endif
}

/* The activations as 16-bit codes, with a scale and a sum per block of 32. */
typedef struct {
    int16_t *codes;
    float *scale, *sum;
} Activations;

static Activations quantized_activations(const float *x, int rows, int in) {
    int64_t blocks = (int64_t)rows * in / BLOCK;
    Activations act = {malloc((size_t)rows * in * sizeof(int16_t)), malloc(blocks * sizeof(float)), malloc(blocks * sizeof(float))};
    quantize_activations(x, rows, in, act.codes, act.scale, act.sum);
    return act;
}

static void free_activations(Activations act) {
    free(act.codes);
    free(act.scale);
    free(act.sum);
}


/* y [rows, out] = x [rows, in] @ W.T for a Q4_1 weight (codes, scale, minimum as above). Rows are
 * taken MAX_ROWS at a time, each chunk reading every weight block once. */
void q4_1_gemv(const uint8_t *codes, const float *scale, const float *minimum, const float *x, float *y, int rows,
               int out, int in, int threads) {
    int blocks = in / BLOCK;
    Activations act = quantized_activations(x, rows, in);
    for (int first = 0; first < rows; first += MAX_ROWS) {
        int chunk = rows - first < MAX_ROWS ? rows - first : MAX_ROWS;
        const int16_t *xq = act.codes + (int64_t)first * in;
        const float *xd = act.scale + (int64_t)first * blocks, *xsum = act.sum + (int64_t)first * blocks;
        float *y_chunk = y + (int64_t)first * out;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int pair = 0; pair < (out + 1) / 2; pair++) {
            /* an odd last column pairs with itself (computed twice, stored twice in one place) */
            int n0 = 2 * pair, n1 = n0 + 1 < out ? n0 + 1 : n0;
            const uint8_t *codes0 = codes + (int64_t)n0 * in / 2, *codes1 = codes + (int64_t)n1 * in / 2;
            const float *d0 = scale + (int64_t)n0 * blocks, *d1 = scale + (int64_t)n1 * blocks;
            const float *m0 = minimum + (int64_t)n0 * blocks, *m1 = minimum + (int64_t)n1 * blocks;
            float columns[MAX_ROWS][2] = {{0}};
            switch (chunk) { /* one specialized copy per row count */
#define Q4_ROWS(R) case R: q4_1_pair(codes0, d0, m0, codes1, d1, m1, xq, xd, xsum, R, blocks, columns); break;
                Q4_ROWS(1) Q4_ROWS(2) Q4_ROWS(3) Q4_ROWS(4) Q4_ROWS(5) Q4_ROWS(6) Q4_ROWS(7) Q4_ROWS(8)
            }
            for (int r = 0; r < chunk; r++) {
                y_chunk[(int64_t)r * out + n0] = columns[r][0];
                y_chunk[(int64_t)r * out + n1] = columns[r][1];
            }
        }
    }
    free_activations(act);
}

/* y [rows, out] = x [rows, in] @ W.T for a Q8_0 weight, MAX_ROWS rows at a time. */
void q8_0_gemv(const int8_t *codes, const float *scale, const float *x, float *y, int rows, int out, int in,
               int threads) {
    int blocks = in / BLOCK;
    Activations act = quantized_activations(x, rows, in);
    for (int first = 0; first < rows; first += MAX_ROWS) {
        int chunk = rows - first < MAX_ROWS ? rows - first : MAX_ROWS;
        const int16_t *xq = act.codes + (int64_t)first * in;
        const float *xd = act.scale + (int64_t)first * blocks;
        float *y_chunk = y + (int64_t)first * out;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int n = 0; n < out; n++) {
            float column[MAX_ROWS] = {0};
            const int8_t *row_codes = codes + (int64_t)n * in;
            const float *d = scale + (int64_t)n * blocks;
            switch (chunk) {
#define Q8_ROWS(R) case R: q8_0_row(row_codes, d, xq, xd, R, blocks, column); break;
                Q8_ROWS(1) Q8_ROWS(2) Q8_ROWS(3) Q8_ROWS(4) Q8_ROWS(5) Q8_ROWS(6) Q8_ROWS(7) Q8_ROWS(8)
            }
            for (int r = 0; r < chunk; r++) y_chunk[(int64_t)r * out + n] = column[r];
        }
    }
    free_activations(act);
}
