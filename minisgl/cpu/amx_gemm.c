/* bf16 matrix-matrix products on Intel's AMX tiles, for fp32 activations (chapter 16, "AMX
 * tiles").
 *
 * An AMX core holds eight tile registers of up to 16 rows x 64 bytes and one instruction,
 * TDPBF16PS, that multiplies two of them into a third:
 *
 *   C[m, n] += sum_p  A[m, 2p] * B[p, 2n]  +  A[m, 2p + 1] * B[p, 2n + 1]      (fp32 sums)
 *
 * C is 16 x 16 fp32, A 16 rows x 32 bf16 (16 activation rows, 32 inputs), B 16 x 32 bf16 holding 32
 * inputs of 16 weight rows as pairs: B[p, 2n + e] = W[n, 2p + e] ("VNNI" order). One instruction is
 * 16 * 16 * 32 multiply-adds, so a decode batch of 32 rows needs only two A tiles for every weight
 * tile it reads: the weights stream once per step, as in a matrix-vector product.
 *
 * oneDNN's bf16 GEMM does the same arithmetic, but at a decode batch's few rows it runs at about
 * half this kernel's speed (SmolLM2's 121 weights from memory, 2 cores of an AMX Xeon, medians of
 * 7: 1 row 30.4 vs 16.4 ms, 32 rows 40.9 vs 21.0, 64 rows 44.2 vs 33.6), and it takes bf16
 * activations, so every call sat between two PyTorch casts. This kernel takes fp32 x, rounds it to
 * bf16 itself (round to nearest even, as `x.to(torch.bfloat16)`), writes fp32 y, and reads weights
 * the loader put in tile order once (minisgl/layers/amx_tiles.py): tiles [out / 16, in / 32, 16, 32]
 * bf16, each 1 KiB tile the exact bytes a tile load wants, a weight row's tiles one after the other,
 * zeros where a shape is not a whole number of tiles. Being a C call, a decode step made of it can
 * be replayed as a CPU graph.
 *
 * Threads take pairs of 16-row weight tiles (32 outputs), and for each pair every block of 32
 * activation rows: 4 C tiles + 2 A tiles + 2 B tiles, all eight registers. A block of 16 rows
 * uses two C tiles; a partial block (the last rows, or the last outputs) is computed on zero-padded
 * rows into a scratch tile and only its real rows and outputs are copied out. Every output row
 * sees the same sequence of instructions whatever the batch around it.
 *
 * The kernel is built only where the compiler targets AMX-BF16 and AVX512-BF16 (-march=native on
 * such a CPU), and Linux must grant the process the tiles' 8 KiB of register state
 * (arch_prctl(ARCH_REQ_XCOMP_PERM)); `amx_bf16_ready` asks for it and says whether the kernel may
 * run. Elsewhere it returns 0 and the layers keep oneDNN.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define TILE_ROWS 16   /* rows of every tile; also outputs per weight tile */
#define TILE_INPUTS 32 /* bf16 inputs per A-tile row (64 bytes) */
#define TILE_ELEMENTS (TILE_ROWS * TILE_INPUTS)
/* How many weight tiles ahead of the multiply each stream is fetched into cache. The hardware
 * prefetchers alone left a third of the speed on the table at 32 rows (SmolLM2's 121 weights on 2
 * cores of an AMX Xeon, from memory, medians of 7: 28.0 -> 19.1 ms at 32 rows, 17.0 -> 13.6 ms at one
 * row, which then reads at the 19.7 GB/s a plain sum reaches). Past the end it is harmless. */
#define PREFETCH_TILES 2
#define STRIP_ROWS (2 * TILE_ROWS) /* weight rows a thread takes at a time: two tiles */

/* LDTILECFG's 64-byte operand: palette 1, then bytes per row and rows of each tile register */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} TileConfig;

int amx_bf16_ready(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }

/* Tile registers: 0-3 sums (C), 4-5 activations (A), 6-7 weights (B); all 16 rows x 64 bytes.
 * The configuration belongs to the thread that loads it, so every OpenMP thread loads its own. */
static void configure_tiles(void) {
    TileConfig config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.bytes_per_row[t] = 64;
        config.rows[t] = TILE_ROWS;
    }
    _tile_loadconfig(&config);
}

/* x [rows, in] fp32 -> [padded_rows, padded_in] bf16 (x rounded to nearest even), zeros past x */
static uint16_t *rounded_activations(const float *x, int rows, int in, int padded_rows, int padded_in) {
    uint16_t *xb = aligned_alloc(64, (size_t)padded_rows * padded_in * sizeof(uint16_t));
    for (int r = 0; r < padded_rows; r++)
        for (int k = 0; k < padded_in; k += TILE_INPUTS) {
            __m512 low = _mm512_setzero_ps(), high = _mm512_setzero_ps();
            if (r < rows) { /* a masked load reads only x's own inputs */
                const float *src = x + (int64_t)r * in + k;
                int left = in - k;
                __mmask16 first = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
                __mmask16 second = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
                low = _mm512_maskz_loadu_ps(first, src);
                high = _mm512_maskz_loadu_ps(second, src + 16);
            }
            _mm512_storeu_si512(xb + (int64_t)r * padded_in + k, (__m512i)_mm512_cvtne2ps_pbh(high, low));
        }
    return xb;
}

/* Ask for `bytes` from `start` on into the L1 cache, a 64-byte line at a time */
static inline void prefetch_bytes(const void *start, int64_t bytes) {
    for (int64_t line = 0; line < bytes; line += 64) _mm_prefetch((const char *)start + line, _MM_HINT_T0);
}

/* Ask for weight tile `step` + PREFETCH_TILES of b (NULL: none): 16 cache lines */
static inline void prefetch_tile(const uint16_t *b, int step) {
    if (b) prefetch_bytes(b + (int64_t)(step + PREFETCH_TILES) * TILE_ELEMENTS, TILE_ELEMENTS * sizeof(uint16_t));
}

/* The sums of 32 activation rows (a, row stride `lda` elements) with the weight tiles b0 and b1
 * (two 16-output tiles, `steps` tiles of 32 inputs each) -> 4 C tiles, stored at c (stride `ldc`). */
static void block_32_rows(const uint16_t *a, int lda, const uint16_t *b0, const uint16_t *b1, int steps, float *c,
                          int ldc) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int s = 0; s < steps; s++) {
        prefetch_tile(b0, s);
        prefetch_tile(b1, s);
        _tile_loadd(4, a + s * TILE_INPUTS, lda * 2);
        _tile_loadd(5, a + (int64_t)TILE_ROWS * lda + s * TILE_INPUTS, lda * 2);
        _tile_loadd(6, b0 + (int64_t)s * TILE_ELEMENTS, 64);
        _tile_loadd(7, b1 + (int64_t)s * TILE_ELEMENTS, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, ldc * 4);
    _tile_stored(1, c + TILE_ROWS, ldc * 4);
    _tile_stored(2, c + (int64_t)TILE_ROWS * ldc, ldc * 4);
    _tile_stored(3, c + (int64_t)TILE_ROWS * ldc + TILE_ROWS, ldc * 4);
}

/* The same for 16 rows and one or two weight tiles (b1 NULL: the last tile of an odd count) */
static void block_16_rows(const uint16_t *a, int lda, const uint16_t *b0, const uint16_t *b1, int steps, float *c,
                          int ldc) {
    _tile_zero(0);
    _tile_zero(1);
    for (int s = 0; s < steps; s++) {
        prefetch_tile(b0, s);
        prefetch_tile(b1, s);
        _tile_loadd(4, a + s * TILE_INPUTS, lda * 2);
        _tile_loadd(6, b0 + (int64_t)s * TILE_ELEMENTS, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (b1) {
            _tile_loadd(7, b1 + (int64_t)s * TILE_ELEMENTS, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
    }
    _tile_stored(0, c, ldc * 4);
    if (b1) _tile_stored(1, c + TILE_ROWS, ldc * 4);
}

/* y [rows, out] fp32 = x [rows, in] fp32 @ W.T, W given as bf16 tiles
 * [ceil(out / 16), ceil(in / 32), 16, 32], zero-padded past `out` outputs and `in` inputs. */
void bf16_tile_gemm(const uint16_t *tiles, const float *x, float *y, int rows, int out, int in, int threads) {
    int steps = (in + TILE_INPUTS - 1) / TILE_INPUTS, padded_in = steps * TILE_INPUTS;
    int padded_rows = (rows + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    int weight_tiles = (out + TILE_ROWS - 1) / TILE_ROWS, pairs = (weight_tiles + 1) / 2;
    uint16_t *xb = rounded_activations(x, rows, in, padded_rows, padded_in);
#pragma omp parallel num_threads(threads)
    {
        float scratch[TILE_ROWS * 2 * TILE_ROWS]; /* a partial block's sums: 16 rows x 32 outputs */
        configure_tiles();
#pragma omp for schedule(static)
        for (int pair = 0; pair < pairs; pair++) {
            int n0 = 2 * pair * TILE_ROWS, width = out - n0 < 2 * TILE_ROWS ? out - n0 : 2 * TILE_ROWS;
            const uint16_t *b0 = tiles + (int64_t)(2 * pair) * steps * TILE_ELEMENTS;
            const uint16_t *b1 = 2 * pair + 1 < weight_tiles ? b0 + (int64_t)steps * TILE_ELEMENTS : NULL;
            /* rows whose sums go straight into y: whole tiles of rows, and of outputs */
            int direct = (b1 ? width == 2 * TILE_ROWS : width == TILE_ROWS) ? rows / TILE_ROWS * TILE_ROWS : 0;
            int m = 0;
            for (; b1 && m + 2 * TILE_ROWS <= direct; m += 2 * TILE_ROWS)
                block_32_rows(xb + (int64_t)m * padded_in, padded_in, b0, b1, steps, y + (int64_t)m * out + n0, out);
            for (; m < direct; m += TILE_ROWS)
                block_16_rows(xb + (int64_t)m * padded_in, padded_in, b0, b1, steps, y + (int64_t)m * out + n0, out);
            for (; m < rows; m += TILE_ROWS) { /* the rest via the scratch tile, copying out what y has room for */
                block_16_rows(xb + (int64_t)m * padded_in, padded_in, b0, b1, steps, scratch, 2 * TILE_ROWS);
                for (int r = 0; r < TILE_ROWS && m + r < rows; r++)
                    memcpy(y + (int64_t)(m + r) * out + n0, scratch + r * 2 * TILE_ROWS, width * sizeof(float));
            }
        }
        _tile_release(); /* back to the init state: a context switch need not save 8 KiB of tiles */
    }
    free(xb);
}

/* ---- GGUF's 4- and 8-bit blocks on the same tiles -----------------------------------------------
 *
 * For quantized weights the roles swap: the weights are the A operand, the activations B. An A
 * tile is 16 weight rows x 32 inputs in plain row order, which is exactly what dequantizing one
 * GGUF block of each of 16 rows gives (w = d * q + m, 32 values, rounded to bf16): no reordering of
 * weights at all. The activations are put in pair order once per call (B[p, 2m + e] = x[m, 2p + e]),
 * and each 16 x 16 sum tile is y transposed: [outputs, rows], written out transposed.
 *
 * Threads take strips of 32 weight rows; a strip is dequantized once into the thread's buffer
 * [32, in] bf16 (96 KiB for in = 1536: it stays in L2) and multiplied with every 32 rows of x.
 * The weights stream as their 4.5 or 8.5 bits, and the arithmetic runs on the tiles.
 *
 * What is not tile arithmetic is most of the time here, so it is vectorized too: both transposes
 * move 16 x 16 blocks through registers, and the dequantizer is called once per strip, not per
 * block (a call per block through a pointer is not inlined into OpenMP's outlined loop). Together
 * with the Q4_1 table lookup and prefetching, SmolLM2's 120 layer matmuls as Q4_1 at 32 rows, from
 * memory, went from 20.9 to 14.4 ms (2 cores of an AMX Xeon, medians of 15, alternated, as
 * benchmark/cpu_matmuls.py times them; the same bits), about what they take in bf16 tiles. */

/* How many weight rows ahead of the dequantizer a strip's codes and scales are fetched into cache.
 * A row's codes are only a few cache lines (288 bytes at 576 inputs), too short a run for the
 * hardware prefetcher to get ahead of. */
#define PREFETCH_ROWS 4

/* Weight rows n0 .. n0 + count - 1 (each `in` inputs, blocks of 32) -> strip [count, in] bf16 */
typedef void (*DequantizeRows)(const void *codes, const float *scale, const float *minimum, int n0, int count,
                               int in, uint16_t *strip);

/* Q4_1: a block's 32 weights are d * q + m for 4-bit codes q, so it can hold only 16 values. They
 * are computed once per block (one fma for all 16, rounded to bf16) and the codes look them up
 * (vpermw): the same bits as widening every code and rounding d * q + m one by one. */
static void dequantize_q4_1_rows(const void *codes, const float *scale, const float *minimum, int n0, int count,
                                 int in, uint16_t *strip) {
    const __m512 codes_0_15 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int blocks = in / TILE_INPUTS;
    for (int i = 0; i < count; i++) {
        int64_t first = (int64_t)(n0 + i) * blocks, ahead = first + (int64_t)PREFETCH_ROWS * blocks;
        prefetch_bytes((const uint8_t *)codes + ahead * 16, (int64_t)blocks * 16);
        prefetch_bytes(scale + ahead, (int64_t)blocks * sizeof(float));
        prefetch_bytes(minimum + ahead, (int64_t)blocks * sizeof(float));
        for (int b = 0; b < blocks; b++) {
            int64_t block = first + b;
            /* byte j holds weight j (low nibble) and weight 16 + j (high nibble) */
            __m128i bytes = _mm_loadu_si128((const __m128i *)((const uint8_t *)codes + block * 16));
            __m512 values = _mm512_fmadd_ps(codes_0_15, _mm512_set1_ps(scale[block]), _mm512_set1_ps(minimum[block]));
            __m512i table = (__m512i)_mm512_cvtne2ps_pbh(values, values); /* [32] bf16: the 16 values, twice */
            /* word j < 16: byte j; word 16 + j: byte j >> 4. vpermw reads an index's low 5 bits, and
             * with the table held twice, a stray bit 4 (the next nibble's) picks the same value */
            __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1);
            _mm512_storeu_si512(strip + (int64_t)i * in + b * TILE_INPUTS,
                                _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(both), table));
        }
    }
}

static void dequantize_q8_0_rows(const void *codes, const float *scale, const float *minimum, int n0, int count,
                                 int in, uint16_t *strip) {
    (void)minimum;
    int blocks = in / TILE_INPUTS;
    for (int i = 0; i < count; i++) {
        int64_t first = (int64_t)(n0 + i) * blocks, ahead = first + (int64_t)PREFETCH_ROWS * blocks;
        prefetch_bytes((const int8_t *)codes + ahead * TILE_INPUTS, (int64_t)in);
        prefetch_bytes(scale + ahead, (int64_t)blocks * sizeof(float));
        for (int b = 0; b < blocks; b++) {
            const int8_t *q = (const int8_t *)codes + (first + b) * TILE_INPUTS;
            __m512 d = _mm512_set1_ps(scale[first + b]);
            __m512 w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))), d);
            __m512 w1 =
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)))), d);
            _mm512_storeu_si512(strip + (int64_t)i * in + b * TILE_INPUTS, (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
        }
    }
}

/* dst [rows, cols] (stride dst_stride) = the first rows x cols of src [16, 16] (stride src_stride)
 * transposed, for 32-bit elements: interleave pairs of rows, then pairs of pairs, then move whole
 * 128-bit lanes (4 x 16 shuffles instead of 256 single loads and stores). */
static void transpose_16x16(const uint32_t *src, int64_t src_stride, uint32_t *dst, int64_t dst_stride, int rows,
                            int cols) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + i * src_stride);
    for (int j = 0; j < 8; j++) {
        t[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
        t[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
    }
    for (int j = 0; j < 4; j++) { /* lane L of r[4j + k]: column 4L + k of rows 4j .. 4j + 3 */
        r[4 * j] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
        r[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
        r[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
        r[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
    }
    __mmask16 columns = (__mmask16)((1u << cols) - 1);
    for (int k = 0; k < 4; k++) { /* column 4L + k = lane L of r[k], r[4 + k], r[8 + k], r[12 + k] */
        __m512i even01 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88), odd01 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xDD);
        __m512i even23 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x88);
        __m512i odd23 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xDD);
        __m512i lanes[4] = {_mm512_shuffle_i32x4(even01, even23, 0x88), _mm512_shuffle_i32x4(odd01, odd23, 0x88),
                            _mm512_shuffle_i32x4(even01, even23, 0xDD), _mm512_shuffle_i32x4(odd01, odd23, 0xDD)};
        for (int lane = 0; lane < 4; lane++)
            if (4 * lane + k < rows) _mm512_mask_storeu_epi32(dst + (4 * lane + k) * dst_stride, columns, lanes[lane]);
    }
}

/* xb [padded_rows, in] bf16 -> pair order [padded_rows / 16, in / 32, 16, 32]: tile (mb, kb) holds
 * B[p, 2m + e] = x[16 mb + m, 32 kb + 2p + e], the transpose of a 16 x 16 block of bf16 pairs */
static uint32_t *activation_tiles(const uint16_t *xb, int padded_rows, int in) {
    int steps = in / TILE_INPUTS;
    uint32_t *tiles = aligned_alloc(64, (size_t)padded_rows * in * sizeof(uint16_t));
    const uint32_t *pairs = (const uint32_t *)xb; /* [padded_rows, in / 2] */
    for (int mb = 0; mb < padded_rows / TILE_ROWS; mb++)
        for (int kb = 0; kb < steps; kb++)
            transpose_16x16(pairs + (int64_t)mb * TILE_ROWS * (in / 2) + kb * TILE_ROWS, in / 2,
                            tiles + ((int64_t)mb * steps + kb) * TILE_ROWS * TILE_ROWS, TILE_ROWS, TILE_ROWS,
                            TILE_ROWS);
    return tiles;
}

/* y [rows, out] = x [rows, in] @ W.T for GGUF-blocked W (in a multiple of 32) */
static void quantized_tile_gemm(const void *codes, const float *scale, const float *minimum,
                                DequantizeRows dequantize_rows, const float *x, float *y, int rows, int out, int in,
                                int threads) {
    int steps = in / TILE_INPUTS, padded_rows = (rows + STRIP_ROWS - 1) / STRIP_ROWS * STRIP_ROWS;
    int strips = (out + STRIP_ROWS - 1) / STRIP_ROWS;
    uint16_t *xb = rounded_activations(x, rows, in, padded_rows, in);
    const uint16_t *xt = (const uint16_t *)activation_tiles(xb, padded_rows, in);
#pragma omp parallel num_threads(threads)
    {
        uint16_t *strip = aligned_alloc(64, (size_t)STRIP_ROWS * in * sizeof(uint16_t)); /* [32, in] */
        float sums[STRIP_ROWS * STRIP_ROWS]; /* the four C tiles as one: [32 outputs, 32 rows] */
        configure_tiles();
#pragma omp for schedule(static)
        for (int s = 0; s < strips; s++) {
            int n0 = s * STRIP_ROWS, count = out - n0 < STRIP_ROWS ? out - n0 : STRIP_ROWS;
            dequantize_rows(codes, scale, minimum, n0, count, in, strip);
            if (count < STRIP_ROWS) /* rows past the weight multiply as zeros */
                memset(strip + (int64_t)count * in, 0, (size_t)(STRIP_ROWS - count) * in * sizeof(uint16_t));
            for (int m0 = 0; m0 < rows; m0 += STRIP_ROWS) { /* the weights are A here, the activations B */
                const uint16_t *b0 = xt + (int64_t)(m0 / TILE_ROWS) * steps * TILE_ELEMENTS;
                block_32_rows(strip, in, b0, b0 + (int64_t)steps * TILE_ELEMENTS, steps, sums, STRIP_ROWS);
                for (int mb = 0; mb < STRIP_ROWS && m0 + mb < rows; mb += TILE_ROWS) /* sums [outputs, rows] */
                    for (int nb = 0; nb < count; nb += TILE_ROWS) {
                        int height = rows - m0 - mb, width = count - nb;
                        transpose_16x16((const uint32_t *)sums + nb * STRIP_ROWS + mb, STRIP_ROWS,
                                        (uint32_t *)y + (int64_t)(m0 + mb) * out + n0 + nb, out,
                                        height < TILE_ROWS ? height : TILE_ROWS, width < TILE_ROWS ? width : TILE_ROWS);
                    }
            }
        }
        _tile_release();
        free(strip);
    }
    free((void *)xt);
    free(xb);
}

/* y [rows, out] = x [rows, in] @ W.T for a Q4_1 weight (layouts as quant_gemm.c's), on AMX tiles */
void q4_1_tile_gemm(const uint8_t *codes, const float *scale, const float *minimum, const float *x, float *y,
                    int rows, int out, int in, int threads) {
    quantized_tile_gemm(codes, scale, minimum, dequantize_q4_1_rows, x, y, rows, out, in, threads);
}

/* y [rows, out] = x [rows, in] @ W.T for a Q8_0 weight, on AMX tiles */
void q8_0_tile_gemm(const int8_t *codes, const float *scale, const float *x, float *y, int rows, int out, int in,
                    int threads) {
    quantized_tile_gemm(codes, scale, NULL, dequantize_q8_0_rows, x, y, rows, out, in, threads);
}

#else /* no AMX-BF16 in this build: the layers keep oneDNN */

int amx_bf16_ready(void) { return 0; }

void bf16_tile_gemm(const uint16_t *tiles, const float *x, float *y, int rows, int out, int in, int threads) {
    (void)tiles, (void)x, (void)y, (void)rows, (void)out, (void)in, (void)threads;
    abort(); /* never called: amx_bf16_ready() said no */
}

void q4_1_tile_gemm(const uint8_t *codes, const float *scale, const float *minimum, const float *x, float *y,
                    int rows, int out, int in, int threads) {
    (void)codes, (void)scale, (void)minimum, (void)x, (void)y, (void)rows, (void)out, (void)in, (void)threads;
    abort();
}

void q8_0_tile_gemm(const int8_t *codes, const float *scale, const float *x, float *y, int rows, int out, int in,
                    int threads) {
    (void)codes, (void)scale, (void)x, (void)y, (void)rows, (void)out, (void)in, (void)threads;
    abort();
}

#endif
