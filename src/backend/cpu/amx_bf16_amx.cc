// The AMX kernel of amx_bf16.h, compiled with the AMX flags (cmake: files
// named *_amx.cc). Like the other ISA files it calls no std:: template that
// could be emitted out of line.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/amx_bf16.h"

namespace rowlm::cpu {
namespace {

// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0-3 accumulators (two weight tiles x two row tiles), 4-5 weight
// tiles (16 rows of w, 32 elements each), 6-7 packed x tiles. Every tile is
// 16 rows of 64 bytes; partial tiles are zero-padded in memory instead.
constexpr int kTileBytes = 64;

// Where a weight tile's block b comes from: w itself, or zero-padded
// copies where it would read past K (tail) or past N (scratch).
struct WeightTile {
  const uint16_t* rows = nullptr;  // block 0
  int64_t stride_bytes = 0;
  const uint16_t* tail = nullptr;  // the last block when K % 32 != 0, else null
};

void store_tile(int tile, float* c) {
  switch (tile) {
    case 0: _tile_stored(0, c, kTileBytes); break;
    case 1: _tile_stored(1, c, kTileBytes); break;
    case 2: _tile_stored(2, c, kTileBytes); break;
    default: _tile_stored(3, c, kTileBytes); break;
  }
}

}  // namespace

void amx_matmul_bf16(const uint16_t* packed, int64_t M, int64_t K, int64_t t0, int64_t t1, const uint16_t* w,
                     int64_t ldw, int64_t N, float* y, int64_t ldy, uint16_t* scratch) {
  if (N <= 0 || t1 <= t0) return;
  const int64_t blocks = amx_blocks(K), padded_k = blocks * kAmxBlock;
  const int64_t full_blocks = K / kAmxBlock, rest = K - full_blocks * kAmxBlock;
  const int64_t tiles_n = (N + kAmxRows - 1) / kAmxRows, full_tiles_n = N / kAmxRows;
  // The last rows of w when N % 16 != 0, zero-padded to 16 rows of
  // padded_k: the tile never reads past w.
  if (full_tiles_n < tiles_n) {
    std::memset(scratch, 0, std::size_t(kAmxRows * padded_k) * sizeof(uint16_t));
    for (int64_t r = 0; r < N - full_tiles_n * kAmxRows; ++r)
      std::memcpy(scratch + r * padded_k, w + (full_tiles_n * kAmxRows + r) * ldw, std::size_t(K) * sizeof(uint16_t));
  }
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = kAmxRows, cfg.colsb[t] = kTileBytes;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t tails[2][kAmxRows * kAmxBlock];
  alignas(64) float c[kAmxRows * kAmxRows];
  for (int64_t nt = 0; nt < tiles_n; nt += 2) {
    const bool two_n = nt + 1 < tiles_n;
    WeightTile a[2];
    for (int j = 0; j < (two_n ? 2 : 1); ++j) {
      const int64_t tile = nt + j;
      if (tile < full_tiles_n) {
        a[j].rows = w + tile * kAmxRows * ldw;
        a[j].stride_bytes = ldw * int64_t(sizeof(uint16_t));
        if (rest) {  // the last block's columns past K read as zero, not as the next row
          std::memset(tails[j], 0, sizeof tails[j]);
          for (int64_t r = 0; r < kAmxRows; ++r)
            std::memcpy(tails[j] + r * kAmxBlock, a[j].rows + r * ldw + full_blocks * kAmxBlock,
                        std::size_t(rest) * sizeof(uint16_t));
          a[j].tail = tails[j];
        }
      } else {
        a[j].rows = scratch;
        a[j].stride_bytes = padded_k * int64_t(sizeof(uint16_t));
      }
    }
    for (int64_t mt = t0; mt < t1; mt += 2) {
      const bool two_m = mt + 1 < t1;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const uint16_t* x0 = packed + mt * blocks * kAmxRows * kAmxBlock;
      const uint16_t* x1 = x0 + blocks * kAmxRows * kAmxBlock;
      for (int64_t b = 0; b < blocks; ++b) {
        if (a[0].tail && b == full_blocks)
          _tile_loadd(4, a[0].tail, kTileBytes);
        else
          _tile_loadd(4, a[0].rows + b * kAmxBlock, a[0].stride_bytes);
        _tile_loadd(6, x0 + b * kAmxRows * kAmxBlock, kTileBytes);
        if (two_m) _tile_loadd(7, x1 + b * kAmxRows * kAmxBlock, kTileBytes);
        _tile_dpbf16ps(0, 4, 6);
        if (two_m) _tile_dpbf16ps(1, 4, 7);
        if (two_n) {
          if (a[1].tail && b == full_blocks)
            _tile_loadd(5, a[1].tail, kTileBytes);
          else
            _tile_loadd(5, a[1].rows + b * kAmxBlock, a[1].stride_bytes);
          _tile_dpbf16ps(2, 5, 6);
          if (two_m) _tile_dpbf16ps(3, 5, 7);
        }
      }
      // Accumulator (j, i) holds C[n][m] for weight tile nt + j, row tile mt + i.
      for (int j = 0; j < (two_n ? 2 : 1); ++j)
        for (int i = 0; i < (two_m ? 2 : 1); ++i) {
          store_tile(2 * j + i, c);
          const int64_t n0 = (nt + j) * kAmxRows, m0 = (mt + i) * kAmxRows;
          const int64_t rows_n = N - n0 < kAmxRows ? N - n0 : kAmxRows;
          const int64_t rows_m = M - m0 < kAmxRows ? M - m0 : kAmxRows;
          for (int64_t r = 0; r < rows_m; ++r)
            for (int64_t n = 0; n < rows_n; ++n) y[(m0 + r) * ldy + n0 + n] = c[n * kAmxRows + r];
        }
    }
  }
  _tile_release();
}

double amx_bf16_chains(int64_t iters, float* sink) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = kAmxRows, cfg.colsb[t] = kTileBytes;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t ones[kAmxRows * kAmxBlock], tiny[kAmxRows * kAmxBlock];
  for (int i = 0; i < kAmxRows * kAmxBlock; ++i) ones[i] = 0x3f80, tiny[i] = 0x3380;  // 1.0, 2^-24
  _tile_loadd(4, ones, kTileBytes);
  _tile_loadd(6, tiny, kTileBytes);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(3, 4, 6);
  }
  alignas(64) float c[kAmxRows * kAmxRows];
  _tile_stored(0, c, kTileBytes);
  _tile_release();
  *sink = c[0];
  return double(iters) * 4 * kAmxRows * kAmxRows * kAmxBlock * 2;
}

}  // namespace rowlm::cpu
