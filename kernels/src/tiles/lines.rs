//! Buffers that begin on a cache line (64 bytes), for what the tiles load and
//! store.
//!
//! A tile's row is 64 bytes. Where a buffer begins 16 bytes past a line, as
//! the allocator's large blocks do, every row of every load spans two lines:
//! on 2026-12-07's Xeon a 256-token product then ran at 358 billion
//! multiply-adds a second against 838 from buffers on a line, and a store's
//! rows cost a third more (BENCHMARKS.md, "Tiles on a cache line"). A `Vec`
//! of `u16` or `f32` promises only its element's alignment, so these are
//! vectors of whole lines seen as their values.

use std::marker::PhantomData;
use std::mem::{MaybeUninit, size_of};
use std::ops::{Deref, DerefMut};

/// One cache line, whose bytes past a buffer's last value may be unwritten.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line(MaybeUninit<[u8; 64]>);

/// Values a line may hold: plain numbers, for which every bit pattern (all
/// zeros included) is a value and whose size divides 64.
///
/// # Safety
///
/// Only for types of that kind.
pub unsafe trait Plain: Copy {}
// SAFETY: numbers; any 64 bytes are 32 or 16 of them.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}

/// `len` values of `T` from the start of a cache line; the last line's rest
/// (zeros, or unwritten bytes after `written`) is never read through the slice.
pub struct Lines<T: Plain> {
    lines: Vec<Line>,
    len: usize,
    values: PhantomData<T>,
}

impl<T: Plain> Lines<T> {
    fn per_line() -> usize {
        64 / size_of::<T>()
    }

    /// `len` zeros.
    pub fn zeroed(len: usize) -> Lines<T> {
        Lines {
            lines: vec![Line(MaybeUninit::new([0; 64])); len.div_ceil(Self::per_line())],
            len,
            values: PhantomData,
        }
    }

    /// `len` values written by `fill`, which must write every one of them
    /// (a product's stores do; zeroing buffers first was a twentieth of a
    /// passage).
    ///
    /// # Safety
    ///
    /// `fill` writes all `len` values before it returns `Ok`; on `Err` the
    /// buffer is dropped unread.
    pub(crate) unsafe fn written<E>(
        len: usize,
        fill: impl FnOnce(&mut [MaybeUninit<T>]) -> Result<(), E>,
    ) -> Result<Lines<T>, E> {
        let count = len.div_ceil(Self::per_line());
        let mut lines: Vec<Line> = Vec::with_capacity(count);
        let spare = lines
            .spare_capacity_mut()
            .as_mut_ptr()
            .cast::<MaybeUninit<T>>();
        // SAFETY: the capacity holds `count` lines, `count × 64` bytes, at least
        // `len` values of `T`, whose alignment a line's exceeds.
        fill(unsafe { std::slice::from_raw_parts_mut(spare, len) })?;
        // SAFETY: a `Line` may hold unwritten bytes, and `fill` wrote the
        // first `len` values (this function's condition), the only ones read.
        unsafe { lines.set_len(count) };
        Ok(Lines {
            lines,
            len,
            values: PhantomData,
        })
    }

    /// The first `len` values only (the lines stay).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl<T: Plain> Deref for Lines<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the lines hold at least `len` values of `T` (a `Plain` type:
        // any bytes are values), aligned since a line's alignment is 64.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl<T: Plain> DerefMut for Lines<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, with the lines borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

impl<T: Plain> Clone for Lines<T> {
    fn clone(&self) -> Lines<T> {
        Lines {
            lines: self.lines.clone(),
            len: self.len,
            values: PhantomData,
        }
    }
}

impl<T: Plain + std::fmt::Debug> std::fmt::Debug for Lines<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}
