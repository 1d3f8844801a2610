//! [`LaunchTag`]: which launch recorded a violation (spec §2.8, `CanaryLaunchTag`).

use crate::Error;
use core::fmt;

/// The launch that recorded a violation row, stamped into field 0 (`kernel_kind`) of every row.
///
/// Each (K|V) half of a pool has a "head" and a "tail" canary buffer, and a "sweep" is a
/// verify-only pass; FULL and SWA groups get their own tags. Values are exact (spec §2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum LaunchTag {
    /// `HEAD_K_FULL = 0`.
    HeadKFull = 0,
    /// `HEAD_V_FULL = 1`.
    HeadVFull = 1,
    /// `TAIL_K_FULL = 2`.
    TailKFull = 2,
    /// `TAIL_V_FULL = 3`.
    TailVFull = 3,
    /// `SWEEP_K_FULL = 4`.
    SweepKFull = 4,
    /// `SWEEP_V_FULL = 5`.
    SweepVFull = 5,
    /// `HEAD_K_SWA = 6`.
    HeadKSwa = 6,
    /// `HEAD_V_SWA = 7`.
    HeadVSwa = 7,
    /// `TAIL_K_SWA = 8`.
    TailKSwa = 8,
    /// `TAIL_V_SWA = 9`.
    TailVSwa = 9,
    /// `SWEEP_K_SWA = 10`.
    SweepKSwa = 10,
    /// `SWEEP_V_SWA = 11`.
    SweepVSwa = 11,
}

impl LaunchTag {
    /// Every tag, in value order (index = value), as SGLang's per-tag counter arrays use them.
    pub const ALL: [LaunchTag; 12] = [
        LaunchTag::HeadKFull,
        LaunchTag::HeadVFull,
        LaunchTag::TailKFull,
        LaunchTag::TailVFull,
        LaunchTag::SweepKFull,
        LaunchTag::SweepVFull,
        LaunchTag::HeadKSwa,
        LaunchTag::HeadVSwa,
        LaunchTag::TailKSwa,
        LaunchTag::TailVSwa,
        LaunchTag::SweepKSwa,
        LaunchTag::SweepVSwa,
    ];

    /// The tag's value as the kernels stamp it (field 0 of a violation row).
    pub const fn value(self) -> i64 {
        self as i32 as i64
    }

    /// SGLang's name, e.g. `"HEAD_K_FULL"`.
    pub const fn name(self) -> &'static str {
        match self {
            LaunchTag::HeadKFull => "HEAD_K_FULL",
            LaunchTag::HeadVFull => "HEAD_V_FULL",
            LaunchTag::TailKFull => "TAIL_K_FULL",
            LaunchTag::TailVFull => "TAIL_V_FULL",
            LaunchTag::SweepKFull => "SWEEP_K_FULL",
            LaunchTag::SweepVFull => "SWEEP_V_FULL",
            LaunchTag::HeadKSwa => "HEAD_K_SWA",
            LaunchTag::HeadVSwa => "HEAD_V_SWA",
            LaunchTag::TailKSwa => "TAIL_K_SWA",
            LaunchTag::TailVSwa => "TAIL_V_SWA",
            LaunchTag::SweepKSwa => "SWEEP_K_SWA",
            LaunchTag::SweepVSwa => "SWEEP_V_SWA",
        }
    }

    /// The tag of `value`, if it is one of the twelve.
    pub fn from_value(value: i64) -> Option<LaunchTag> {
        usize::try_from(value)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }
}

impl TryFrom<i64> for LaunchTag {
    type Error = Error;
    /// The tag of `value`; anything but 0..=11 is [`Error::InvalidEnumValue`].
    fn try_from(value: i64) -> Result<Self, Error> {
        Self::from_value(value).ok_or(Error::InvalidEnumValue {
            what: "kernel_kind (launch tag)",
            value,
        })
    }
}

impl fmt::Display for LaunchTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_names_match_the_spec() {
        let names = [
            "HEAD_K_FULL",
            "HEAD_V_FULL",
            "TAIL_K_FULL",
            "TAIL_V_FULL",
            "SWEEP_K_FULL",
            "SWEEP_V_FULL",
            "HEAD_K_SWA",
            "HEAD_V_SWA",
            "TAIL_K_SWA",
            "TAIL_V_SWA",
            "SWEEP_K_SWA",
            "SWEEP_V_SWA",
        ];
        for (i, name) in names.iter().enumerate() {
            let tag = LaunchTag::try_from(i as i64).unwrap();
            assert_eq!(tag.value(), i as i64);
            assert_eq!(tag.to_string(), *name);
        }
        assert_eq!(LaunchTag::SweepVSwa.value(), 11);
    }

    #[test]
    fn unknown_values_are_rejected_by_value() {
        assert_eq!(LaunchTag::from_value(12), None);
        assert_eq!(LaunchTag::from_value(-1), None);
        let err = LaunchTag::try_from(99).unwrap_err();
        assert!(err.to_string().contains("99"), "{err}");
    }
}
