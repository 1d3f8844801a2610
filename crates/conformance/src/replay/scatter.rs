//! Replay of `scatter_req_token_ids` cases (golden README §5.6). A wrong rank or element type
//! of a dumped tensor is the typed error of its accessor ([`Error::Malformed`],
//! [`Error::WrongElementType`]); everything else is checked by the op.

use super::Replayed;
use crate::case::Case;
use crate::compare::Produced;
use crate::tensor::Tensor;
use crate::Error;
use kv_canary::ExpectedTokenTable;
use kv_canary_testkit::HostBackend;

/// Replays one `scatter_req_token_ids` case on `backend`.
pub(super) fn replay<B: HostBackend>(case: &Case, backend: &B) -> Replayed {
    let inputs = case.inputs();
    let decode = || -> Result<_, Error> {
        let i64s = |key: &'static str| inputs.required_tensor(key)?.into_i64(key);
        let flat_in = i64s("flat_in")?;
        let offsets = i64s("offsets")?;
        let req_pool_indices = i64s("req_pool_indices")?;
        let (rows, cols, cells) = inputs
            .required_tensor("pool_out")?
            .into_i32_table("pool_out")?;
        let pool = ExpectedTokenTable::from_vec(rows, cols, cells)?;
        Ok((flat_in, offsets, req_pool_indices, pool))
    };
    let (flat_in, offsets, req_pool_indices, mut pool) = match decode() {
        Ok(d) => d,
        Err(e) => return Replayed::Error(e),
    };
    let before = pool.clone();
    let launched = backend
        .scatter_req_token_ids(&flat_in, &offsets, &req_pool_indices, &mut pool)
        .map(drop);
    match launched {
        Ok(_) => Replayed::Outputs(outputs(&pool)),
        Err(error) if pool != before => Replayed::MutatedThenFailed {
            error: error.into(),
            buffer: "pool_out",
        },
        Err(error) => Replayed::Error(error.into()),
    }
}

fn outputs(pool: &ExpectedTokenTable) -> Produced {
    let mut t = Tensor::i32(pool.as_slice().to_vec());
    t.shape = vec![pool.rows(), pool.width()];
    vec![("pool_out".into(), t)]
}
