//! [`RealKvSources`]: the at most four sources of one launch, in fold order.

use super::RealKvSource;
use crate::consts::MAX_REAL_KV_SOURCES;
use crate::Error;

/// A number of real-KV sources, as a type: the subject of [`AtMostFourSources`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceCount<const N: usize>;

/// Implemented for `SourceCount<0>` to `SourceCount<4>`: the CUDA ABI carries at most four
/// sources, so an array of five does not compile.
#[diagnostic::on_unimplemented(
    message = "kv-canary: too many real-KV sources: `{Self}`, but a launch fingerprints at most 4",
    label = "the CUDA ABI carries at most 4 real-KV sources per launch",
    note = "fold fewer sources, or build them at run time with `RealKvSources::try_from_slice`, which returns `Error::TooManyRealKvSources`"
)]
pub trait AtMostFourSources {}

impl AtMostFourSources for SourceCount<0> {}
impl AtMostFourSources for SourceCount<1> {}
impl AtMostFourSources for SourceCount<2> {}
impl AtMostFourSources for SourceCount<3> {}
impl AtMostFourSources for SourceCount<4> {}

/// The real-KV sources of one launch (0 to 4), in fold order (order matters: spec §2.11).
///
/// Stored inline like the CUDA ABI's table: four slots, the unused ones never read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealKvSources<'a> {
    slots: [RealKvSource<'a>; MAX_REAL_KV_SOURCES],
    len: usize,
}

impl<'a> RealKvSources<'a> {
    /// No sources.
    pub const EMPTY: RealKvSources<'static> = RealKvSources {
        slots: [RealKvSource::unused(); MAX_REAL_KV_SOURCES],
        len: 0,
    };

    /// `N <= 4` sources, checked by the compiler:
    ///
    /// ```
    /// use kv_canary::{RealKvParams, RealKvSource, RealKvSources};
    /// let kv = vec![0u8; 256];
    /// let a = RealKvSource::new(&kv, 64, RealKvParams::new(1, 64, 64))?;
    /// assert_eq!(RealKvSources::from_array([a, a]).len(), 2);
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    ///
    /// ```compile_fail
    /// use kv_canary::{RealKvParams, RealKvSource, RealKvSources};
    /// let kv = vec![0u8; 256];
    /// let a = RealKvSource::new(&kv, 64, RealKvParams::new(1, 64, 64)).unwrap();
    /// RealKvSources::from_array([a, a, a, a, a]); // five sources
    /// ```
    pub fn from_array<const N: usize>(sources: [RealKvSource<'a>; N]) -> Self
    where
        SourceCount<N>: AtMostFourSources,
    {
        let mut out = RealKvSources {
            slots: [RealKvSource::unused(); MAX_REAL_KV_SOURCES],
            len: N,
        };
        out.slots[..N].copy_from_slice(&sources);
        out
    }

    /// Sources counted at run time (conformance dumps, configs): more than 4 is
    /// [`Error::TooManyRealKvSources`].
    pub fn try_from_slice(sources: &[RealKvSource<'a>]) -> Result<Self, Error> {
        if sources.len() > MAX_REAL_KV_SOURCES {
            return Err(Error::TooManyRealKvSources {
                count: sources.len(),
                max: MAX_REAL_KV_SOURCES,
            });
        }
        let mut out = RealKvSources {
            slots: [RealKvSource::unused(); MAX_REAL_KV_SOURCES],
            len: sources.len(),
        };
        out.slots[..sources.len()].copy_from_slice(sources);
        Ok(out)
    }

    /// The sources, in fold order.
    pub fn as_slice(&self) -> &[RealKvSource<'a>] {
        &self.slots[..self.len]
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no source.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for RealKvSources<'_> {
    fn default() -> Self {
        RealKvSources::EMPTY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::real_kv::RealKvParams;

    #[test]
    fn five_sources_at_run_time_name_the_count() {
        let kv = vec![0u8; 64];
        let a = RealKvSource::new(&kv, 16, RealKvParams::new(1, 16, 16)).unwrap();
        let err = RealKvSources::try_from_slice(&[a; 5]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: at most 4 RealKvSource entries supported by the CUDA ABI, got 5"
        );
        let four = RealKvSources::try_from_slice(&[a; 4]).unwrap();
        assert_eq!(four.as_slice(), &[a; 4]);
        assert_eq!(RealKvSources::from_array([]).len(), 0);
        assert!(RealKvSources::EMPTY.is_empty());
    }
}
