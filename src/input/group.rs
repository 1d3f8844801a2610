//! KV pool groups: [`Full`], or [`Swa`] with its window and full-to-SWA lookup table.

use super::element::IndexElement;

mod sealed {
    pub trait Sealed {}
}

/// A KV pool group the plan op can plan for (spec §1, §3.2).
///
/// Implemented by [`Full`] and by [`Swa`]; a bare [`SwaWindow`] (a window without its LUT) is not
/// a group, so SGLang's run-time check "needs full_to_swa_index_mapping when swa_window_size > 0"
/// is a compile error here.
#[diagnostic::on_unimplemented(
    message = "kv-canary: `{Self}` is not a plannable KV group: an SWA group needs its full-to-SWA lookup table",
    label = "a window without `full_to_swa_index_mapping`",
    note = "call `.with_lut(&full_to_swa_index_mapping)` on the window, or plan a `Full` group"
)]
pub trait Group: Copy + sealed::Sealed {
    /// The element type of the lookup table (`i64` for [`Full`], which has none).
    type Lut: IndexElement;
    /// The sliding window (`swa_window_size`); 0 = no window.
    fn window(&self) -> u64;
    /// The full-to-SWA lookup table, if any.
    fn lut(&self) -> Option<&[Self::Lut]>;
}

/// The FULL group: positions `[0, prefix_len)` are verified in full-pool slot space; no window,
/// no lookup table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Full;

impl sealed::Sealed for Full {}
impl Group for Full {
    type Lut = i64;
    fn window(&self) -> u64 {
        0
    }
    fn lut(&self) -> Option<&[i64]> {
        None
    }
}

/// A sliding window without its lookup table yet: not a [`Group`] until
/// [`with_lut`](SwaWindow::with_lut) supplies one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwaWindow {
    window: u64,
}

impl SwaWindow {
    /// The window (`swa_window_size`).
    pub fn size(self) -> u64 {
        self.window
    }

    /// Attaches `full_to_swa_index_mapping` (length = full pool size + 1 in production, its last
    /// element -1), making a plannable [`Swa`] group. The table is borrowed as the engine keeps
    /// it, of any [`IndexElement`] type (SGLang: `int64`); an entry the plan reads that is past
    /// `i64::MAX` is [`Error::ElementOutOfRange`](crate::Error::ElementOutOfRange).
    pub fn with_lut<L: IndexElement>(self, lut: &[L]) -> Swa<'_, L> {
        Swa {
            window: self.window,
            lut,
        }
    }
}

/// The SWA group: only the last `window` positions of each prefix are verified, and every slot is
/// translated through the lookup table into the SWA sub-pool's index space (spec §3.2).
///
/// A window of 0 keeps every position but still translates (SGLang applies a supplied LUT even
/// when the window is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swa<'a, L: IndexElement = i64> {
    window: u64,
    lut: &'a [L],
}

impl Swa<'_> {
    /// Starts an SWA group of `window` positions; finish it with [`SwaWindow::with_lut`].
    pub fn window(window: u64) -> SwaWindow {
        SwaWindow { window }
    }
}

impl<L: IndexElement> sealed::Sealed for Swa<'_, L> {}
impl<L: IndexElement> Group for Swa<'_, L> {
    type Lut = L;
    fn window(&self) -> u64 {
        self.window
    }
    fn lut(&self) -> Option<&[L]> {
        Some(self.lut)
    }
}
