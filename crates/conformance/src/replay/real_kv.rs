//! Replay of `real_kv_source_new` cases (golden README §5.7): building a
//! [`RealKvSource`] from a dumped byte tensor of any rank and its three
//! parameters. The golden files hold only failing constructions; a successful one produces no
//! outputs to compare.

use super::Replayed;
use crate::case::Case;
use crate::Error;
use kv_canary::{RealKvParams, RealKvSource};

/// `RealKvSource(tensor, page_size, num_bytes_per_token, read_bytes)`.
pub(super) fn replay(case: &Case) -> Replayed {
    let inputs = case.inputs();
    let run = || -> Result<_, Error> {
        let (shape, bytes) = inputs.required_tensor("tensor")?.into_u8("tensor")?;
        let params = RealKvParams::new(
            inputs.int("page_size")?,
            inputs.int("num_bytes_per_token")?,
            inputs.int("read_bytes")?,
        );
        RealKvSource::from_shape(&bytes, &shape, params)?;
        Ok(Vec::new())
    };
    run().into()
}
