/* Quantized matrix-matrix products for CPU batches of more than a few rows (chapter 16, "Multiplying
 * the blocks"; the few-row kernels are in quant_gemv.c).
 *
 * From about 8 rows on, a decode step is bound by arithmetic, not by reading weights: each weight
 * now meets many activations. So these kernels turn a tile of weight rows back into fp32 once
 * (w = d * q + m for Q4_1, w = d * q for Q8_0, as GGUF's own dequantizer; one FMA where it does a
 * multiply and an add, so a weight may differ in its last bit) and then multiply it with every
 * activation row by fp32 FMAs, the way a BLAS GEMM does:
 *
 *   y[m, n] = sum_k x[m, k] * w[n, k]      for a tile of TILE_W weight rows n and TILE_X rows m
 *
 * The tile of TILE_W x TILE_X sums lives in 12 AVX2 registers for the whole sum over k; each step
 * of k loads 16 activations (two registers: x[m..m+15, k], from a transposed copy of x) and
 * broadcasts the TILE_W weights w[n, k], then issues 12 FMAs: the shape BLIS uses for AVX2 (a 6 x
 * 16 micro-tile), with the weight tile standing where BLIS has its packed A panel.
 *
 * Against oneDNN's fp32 GEMM on dense weights this reads 4.5 or 8.5 bits per weight instead of 32:
 * in a real decode step the weights come from memory, not from cache, and there it is faster
 * (30 SmolLM2 layers at 32 rows on 2 AVX2 cores: 65 vs 99 ms, median of 7 alternated passes).
 *
 * Every sum is taken in the same order whatever the number of rows, so a row's result does not
 * depend on its batch; it differs from quant_gemv.c's (which rounds activations to 16 bits), which
 * is why --deterministic keeps that one kernel for every batch size.
 *
 * Layouts: as in quant_gemv.c (GGUF's blocks of 32 inputs, `in` a multiple of 32), x [rows, in] fp32,
 * y [rows, out] fp32.
 */
#include <stdint.h>
#include <stdlib.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define BLOCK 32
#define TILE_W 6  /* weight rows per tile: 6 x 2 accumulators + 2 activation registers + 1 broadcast = 15 of 16 */
#define TILE_X 16 /* activation rows per tile: two 8-float registers */

/* x [rows, in] -> panels [ceil(rows / 16), in, 16]: step k of a tile reads 16 activations in a row.
 * Rows past `rows` are zeros (their sums are computed and never stored). */
static float *transposed_panels(const float *x, int rows, int in) {
    int panels = (rows + TILE_X - 1) / TILE_X;
    float *xt = malloc((size_t)panels * in * TILE_X * sizeof(float));
    for (int p = 0; p < panels; p++) {
        float *panel = xt + (int64_t)p * in * TILE_X;
        for (int j = 0; j < TILE_X; j++) {
            int r = p * TILE_X + j;
            for (int k = 0; k < in; k++) panel[(int64_t)k * TILE_X + j] = r < rows ? x[(int64_t)r * in + k] : 0.0f;
        }
    }
    return xt;
}

/* A quantized weight as the kernels read it: codes [out, in / 2] uint8 (Q4_1) or [out, in] int8
 * (Q8_0); scale and minimum [out, in / 32] (no minimum for Q8_0). */
typedef struct {
    const void *codes;
    const float *scale, *minimum;
    int in;
} QuantizedWeight;

/* Weight row n -> w [in] fp32 */
typedef void (*DequantizeRow)(const QuantizedWeight *weight, int n, float *w);

static void dequantize_q4_1_row(const QuantizedWeight *weight, int n, float *w) {
    int blocks = weight->in / BLOCK;
    const uint8_t *codes = (const uint8_t *)weight->codes + (int64_t)n * weight->in / 2;
    const float *d = weight->scale + (int64_t)n * blocks, *m = weight->minimum + (int64_t)n * blocks;
    for (int b = 0; b < blocks; b++) {
        const uint8_t *block = codes + (int64_t)b * 16;
        float *out = w + (int64_t)b * BLOCK;
#ifdef __AVX2__
        const __m128i low_nibble = _mm_set1_epi8(0x0F);
        __m128i bytes = _mm_loadu_si128((const __m128i *)block);
        __m128i first = _mm_and_si128(bytes, low_nibble);                     /* weights 0..15 */
        __m128i second = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibble); /* weights 16..31 */
        __m256 scale = _mm256_set1_ps(d[b]), minimum = _mm256_set1_ps(m[b]);
        __m128i quarters[4] = {first, _mm_srli_si128(first, 8), second, _mm_srli_si128(second, 8)};
        for (int q = 0; q < 4; q++) { /* 8 codes -> 8 int32 -> 8 floats */
            __m256 code = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(quarters[q]));
            _mm256_storeu_ps(out + 8 * q, _mm256_fmadd_ps(code, scale, minimum));
        }
#else
        for (int j = 0; j < 16; j++) {
            out[j] = (float)(block[j] & 0x0F) * d[b] + m[b];
            out[16 + j] = (float)(block[j] >> 4) * d[b] + m[b];
        }
#endif
    }
}

static void dequantize_q8_0_row(const QuantizedWeight *weight, int n, float *w) {
    int blocks = weight->in / BLOCK;
    const int8_t *codes = (const int8_t *)weight->codes + (int64_t)n * weight->in;
    const float *d = weight->scale + (int64_t)n * blocks;
    for (int b = 0; b < blocks; b++) {
        const int8_t *block = codes + (int64_t)b * BLOCK;
        float *out = w + (int64_t)b * BLOCK;
#ifdef __AVX2__
        __m256 scale = _mm256_set1_ps(d[b]);
        for (int q = 0; q < 4; q++) { /* 8 codes -> 8 int32 -> 8 floats */
            __m128i eight = _mm_loadl_epi64((const __m128i *)(block + 8 * q));
            _mm256_storeu_ps(out + 8 * q, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)), scale));
        }
#else
        for (int j = 0; j < BLOCK; j++) out[j] = (float)block[j] * d[b];
#endif
    }
}

/* tile[i][j] = sum_k w[i, k] * panel[k, j] for the first `nw` weight rows (a compile-time constant
 * at each call, see the switch below, so the accumulators stay in registers). */
static inline __attribute__((always_inline)) void multiply_tile(const float *w, int in, const float *panel,
                                                                const int nw, float tile[TILE_W][TILE_X]) {
#ifdef __AVX2__
    __m256 acc[TILE_W][2];
    for (int i = 0; i < nw; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < in; k++) {
        __m256 x0 = _mm256_loadu_ps(panel + (int64_t)k * TILE_X), x1 = _mm256_loadu_ps(panel + (int64_t)k * TILE_X + 8);
        for (int i = 0; i < nw; i++) {
            __m256 weight = _mm256_broadcast_ss(w + (int64_t)i * in + k);
            acc[i][0] = _mm256_fmadd_ps(weight, x0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(weight, x1, acc[i][1]);
        }
    }
    for (int i = 0; i < nw; i++) {
        _mm256_storeu_ps(tile[i], acc[i][0]);
        _mm256_storeu_ps(tile[i] + 8, acc[i][1]);
    }
#else
    for (int i = 0; i < nw; i++)
        for (int j = 0; j < TILE_X; j++) {
            float total = 0.0f;
            for (int k = 0; k < in; k++) total += w[(int64_t)i * in + k] * panel[(int64_t)k * TILE_X + j];
            tile[i][j] = total;
        }
#endif
}

/* y [rows, out] = x [rows, in] @ W.T. Threads take tiles of TILE_W weight rows; each tile is
 * dequantized once into the thread's own buffer w [TILE_W, in] and multiplied with every panel of
 * 16 activation rows. */
static void quantized_gemm(const QuantizedWeight *weight, DequantizeRow dequantize_row, const float *x, float *y,
                           int rows, int out, int threads) {
    int in = weight->in, panels = (rows + TILE_X - 1) / TILE_X, tiles = (out + TILE_W - 1) / TILE_W;
    float *xt = transposed_panels(x, rows, in);
#pragma omp parallel num_threads(threads)
    {
        float *w = malloc((size_t)TILE_W * in * sizeof(float));
        float tile[TILE_W][TILE_X];
#pragma omp for schedule(static)
        for (int t = 0; t < tiles; t++) {
            int n0 = t * TILE_W, nw = out - n0 < TILE_W ? out - n0 : TILE_W;
            for (int i = 0; i < nw; i++) dequantize_row(weight, n0 + i, w + (int64_t)i * in);
            for (int p = 0; p < panels; p++) {
                const float *panel = xt + (int64_t)p * in * TILE_X;
                switch (nw) { /* one specialized copy per tile height */
                case 1: multiply_tile(w, in, panel, 1, tile); break;
                case 2: multiply_tile(w, in, panel, 2, tile); break;
                case 3: multiply_tile(w, in, panel, 3, tile); break;
                case 4: multiply_tile(w, in, panel, 4, tile); break;
                case 5: multiply_tile(w, in, panel, 5, tile); break;
                default: multiply_tile(w, in, panel, TILE_W, tile);
                }
                int m_count = rows - p * TILE_X < TILE_X ? rows - p * TILE_X : TILE_X;
                for (int j = 0; j < m_count; j++)
                    for (int i = 0; i < nw; i++) y[(int64_t)(p * TILE_X + j) * out + n0 + i] = tile[i][j];
            }
        }
        free(w);
    }
    free(xt);
}

/* y [rows, out] = x [rows, in] @ W.T for a Q4_1 weight */
void q4_1_gemm(const uint8_t *codes, const float *scale, const float *minimum, const float *x, float *y, int rows,
               int out, int in, int threads) {
    QuantizedWeight weight = {codes, scale, minimum, in};
    quantized_gemm(&weight, dequantize_q4_1_row, x, y, rows, out, threads);
}

/* y [rows, out] = x [rows, in] @ W.T for a Q8_0 weight */
void q8_0_gemm(const int8_t *codes, const float *scale, const float *x, float *y, int rows, int out, int in,
               int threads) {
    QuantizedWeight weight = {codes, scale, NULL, in};
    quantized_gemm(&weight, dequantize_q8_0_row, x, y, rows, out, threads);
}
