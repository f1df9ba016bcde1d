//! The 8-bit product's rows on AMX (Advanced Matrix Extensions), for CPUs that
//! have AMX-INT8 (Intel Xeon since Sapphire Rapids): every [`Q8Matrix`] product
//! of many tokens whose rows are a multiple of sixteen, which is the encoder's
//! (a passage at ingest, a question) and a chat prompt's 8-bit matrices.
//!
//! `vpdpbusd` (`int8.rs`) adds 64 products an instruction, and the product ran
//! at about 1.5 a cycle, close to a core's limit. `tdpbssd` multiplies a tile of
//! 16 rows × 32 bytes by one of 32 bytes × 16 columns into 16 × 16 integer sums:
//! 8,192 products an instruction. So the integer work moves to the tile unit and
//! what is left is each block's scaling, on the vector unit.
//!
//! The tiles are laid out so that nothing is copied and the result is the VNNI
//! product's, bit for bit: tile A is sixteen weight rows' block `b`, read in
//! place from the matrix (its rows are a row's length apart); tile B is the
//! panel's block `b` in the layout `int8.rs` already builds (dword `g` of each
//! token in a 64-byte row), but with the tokens' bytes signed, so no correction
//! for an offset is needed; tile C row `i` is row `i`'s sums for the panel's
//! sixteen tokens, the very lanes `vpdpbusd` gave. Each block's sums are then
//! scaled and added in the same order, with the same operations, as there.
//!
//! Linux lends a thread the tiles' 8 KB of state only after the process asks
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); [`available`] asks once. Each call loads
//! its tile configuration and releases the tiles when done, so a worker holds no
//! tile state between products.

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use crate::Q8Matrix;

use super::{PANEL, Panel};

/// Weight rows a tile holds, so rows multiplied together.
pub(super) const ROWS: usize = 16;

/// Whether the 8-bit product's rows run on AMX here: the CPU has AMX-INT8 and
/// the AVX-512 the scaling needs, Linux lends the tiles, and `DESKBELL_AMX` is not
/// `off` (a switch for measuring one path against the other on one build).
pub(crate) fn available() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        let off = std::env::var("DESKBELL_AMX").is_ok_and(|v| v == "off");
        // Leaf 7's EDX bit 25: AMX-INT8.
        !off && super::available() && cpu_has(25) && lent()
    })
}

/// Whether the CPU has the tiles (leaf 7, subleaf 0, EDX bit 24: AMX-TILE) and
/// the feature of EDX's bit `bit` (25 AMX-INT8, 22 AMX-BF16).
pub(crate) fn cpu_has(bit: u32) -> bool {
    if __get_cpuid_max(0).0 < 7 {
        return false;
    }
    let features = __cpuid_count(7, 0).edx;
    features & (1 << 24) != 0 && features & (1 << bit) != 0
}

/// Asks Linux, once, to lend this process's threads the tiles' state; false
/// when it will not (an older kernel, or a hypervisor that hides the state).
pub(crate) fn lent() -> bool {
    static LENT: OnceLock<bool> = OnceLock::new();
    *LENT.get_or_init(ask_to_lend)
}

fn ask_to_lend() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: `arch_prctl` with this request only reads its two integers.
    let answer = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    answer == 0
}

/// The tiles' shapes (`ldtilecfg`'s 64-byte operand, palette 1), here and in
/// `tiles/amx.rs`.
#[repr(C, align(64))]
pub(crate) struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// Tiles `tmm0..` shaped as `shapes` (bytes a row, rows), the rest unused.
    pub(crate) const fn new(shapes: &[(u16, u8)]) -> Self {
        let mut config = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [0; 16],
            rows: [0; 16],
        };
        let mut t = 0;
        while t < shapes.len() {
            config.bytes_per_row[t] = shapes[t].0;
            config.rows[t] = shapes[t].1;
            t += 1;
        }
        config
    }

    /// Loads this configuration into the calling thread's tiles.
    ///
    /// # Safety
    ///
    /// [`lent`] must have returned true on a CPU with the tiles.
    pub(crate) unsafe fn load(&self) {
        // SAFETY: a palette-1 configuration of valid shapes (`new`); the
        // caller found the tiles lent.
        unsafe {
            asm!(
                "ldtilecfg [{}]",
                in(reg) self,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
                options(nostack, readonly),
            )
        };
    }
}

/// Gives the calling thread's tiles back, so it holds no tile state.
///
/// # Safety
///
/// As for [`TileConfig::load`].
pub(crate) unsafe fn release() {
    // SAFETY: as for this function.
    unsafe {
        asm!(
            "tilerelease",
            out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
            out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
            options(nostack, nomem),
        )
    };
}

/// `tmm0` holds sums (16 rows × 16 dwords), `tmm1` weights (16 rows × 32
/// bytes), `tmm2` tokens (8 rows × 64 bytes: 32 bytes of each of 16 tokens,
/// four at a time).
static CONFIG: TileConfig = TileConfig::new(&[(64, 16), (32, 16), (64, 8)]);

/// A tile's sums as `tilestored` writes them: row `i`, token `t`.
#[repr(C, align(64))]
struct Sums([[i32; PANEL]; ROWS]);

/// Rows `first..first + n` of `m` against one panel whose bytes are signed (not
/// plus 128), where `tokens[t]` is token `t`'s `n` outputs for those rows; `n`
/// is a multiple of [`ROWS`].
///
/// # Safety
///
/// [`available`] must have returned true.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn panel_rows(
    m: &Q8Matrix,
    first: usize,
    panel: &Panel,
    tokens: &mut [&mut [f32]],
) {
    let n = tokens.first().map_or(0, |t| t.len());
    // Tile A reads sixteen whole rows: these keep every read within the matrix
    // (checked once a call, not left to the callers).
    assert!(
        n.is_multiple_of(ROWS) && first + n <= m.rows,
        "rows outside the matrix"
    );
    // SAFETY: `available` found the tiles and Linux lent them.
    unsafe { CONFIG.load() };
    for at in (0..n).step_by(ROWS) {
        // SAFETY: as for this function; the rows are within the matrix.
        let mut acc = unsafe { group(m, first + at, panel) };
        // Row-major lanes turned token-major: each token's sixteen outputs are
        // then one store, where 256 single ones took a tenth of an ingest.
        transpose(&mut acc);
        for (out, acc) in tokens.iter_mut().zip(&acc) {
            // SAFETY: sixteen f32 of the token's `n` outputs (`at + 16 <= n`),
            // unaligned store.
            unsafe { _mm512_storeu_ps(out[at..at + ROWS].as_mut_ptr(), *acc) };
        }
    }
    // SAFETY: as for `load` above.
    unsafe { release() };
}

/// Rows `row..row + 16` against the panel: each row's sixteen lanes, one per
/// token, as `int8.rs`'s `tile` gives them.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn group(m: &Q8Matrix, row: usize, panel: &Panel) -> [__m512; ROWS] {
    let bpr = m.blocks_per_row();
    let mut acc = [_mm512_setzero_ps(); ROWS];
    let mut sums = Sums([[0; PANEL]; ROWS]);
    for b in 0..bpr {
        // SAFETY: tile A reads 16 rows of 32 bytes, a row's length apart, from
        // block `b` of row `row` on, within the matrix (the caller's rows);
        // tile B reads the panel block's 512 bytes; the store writes the 1 KB
        // `Sums`.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tileloadd tmm1, [{weights} + {stride} * 1]",
                "tileloadd tmm2, [{tokens} + {row_bytes} * 1]",
                "tdpbssd tmm0, tmm1, tmm2",
                "tilestored [{sums} + {row_bytes} * 1], tmm0",
                weights = in(reg) m.quants[row * bpr + b].as_ptr(),
                tokens = in(reg) panel.quants[b].as_ptr(),
                sums = in(reg) sums.0.as_mut_ptr(),
                stride = in(reg) bpr * crate::BLOCK,
                row_bytes = in(reg) 64usize,
                out("tmm0") _, out("tmm1") _, out("tmm2") _,
                options(nostack),
            );
        }
        scale_into(&mut acc, &sums, m, row, b, panel);
    }
    acc
}

/// A 16 × 16 block of f32 transposed in registers: four rounds of shuffles, each
/// pairing registers a power of two apart.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(r: &mut [__m512; 16]) {
    let mut t = [_mm512_setzero_ps(); 16];
    for k in 0..8 {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    let (pd, ps) = (_mm512_castps_pd, _mm512_castpd_ps);
    for k in (0..16).step_by(4) {
        r[k] = ps(_mm512_unpacklo_pd(pd(t[k]), pd(t[k + 2])));
        r[k + 1] = ps(_mm512_unpackhi_pd(pd(t[k]), pd(t[k + 2])));
        r[k + 2] = ps(_mm512_unpacklo_pd(pd(t[k + 1]), pd(t[k + 3])));
        r[k + 3] = ps(_mm512_unpackhi_pd(pd(t[k + 1]), pd(t[k + 3])));
    }
    for k in [0, 8] {
        for j in 0..4 {
            t[k + j] = _mm512_shuffle_f32x4::<0x88>(r[k + j], r[k + 4 + j]);
            t[k + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(r[k + j], r[k + 4 + j]);
        }
    }
    for j in 0..8 {
        r[j] = _mm512_shuffle_f32x4::<0x88>(t[j], t[8 + j]);
        r[8 + j] = _mm512_shuffle_f32x4::<0xdd>(t[j], t[8 + j]);
    }
}

/// Block `b`'s sums scaled by the tokens' and each row's scale and added to the
/// rows' lanes: `int8.rs`'s `tile` does the same, in the same order.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn scale_into(
    acc: &mut [__m512; ROWS],
    sums: &Sums,
    m: &Q8Matrix,
    row: usize,
    b: usize,
    panel: &Panel,
) {
    let bpr = m.blocks_per_row();
    // SAFETY: sixteen f32, a whole register, unaligned load.
    let x_scale = unsafe { _mm512_loadu_ps(panel.scales[b].as_ptr()) };
    for (i, (acc, sums)) in acc.iter_mut().zip(&sums.0).enumerate() {
        // SAFETY: sixteen i32, a whole register, unaligned load.
        let sum = unsafe { _mm512_loadu_si512(sums.as_ptr().cast()) };
        let scale = _mm512_mul_ps(x_scale, _mm512_set1_ps(m.scales[(row + i) * bpr + b]));
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, *acc);
    }
}
