//! [`TokenLayout`]: where one token's bytes lie inside a source's row (a page, or a block of a
//! paged cache), and in which order the fingerprint reads them.
//!
//! A token's **logical bytes** are `num_bytes_per_token` bytes read as consecutive 16-byte
//! pieces; PARTIAL folds the first piece, ALL the first `read_bytes` (spec §2.11, unchanged).
//! For SGLang's token-major pools and MLA's latent rows the pieces are one contiguous strip
//! ([`TokenLayout::Strip`]). vLLM's paged layouts scatter a token over its block; the layouts
//! below gather its pieces so that the logical bytes are the token's vector in `[head][dim]`
//! order: the bytes its token-major copy would hold, so a cache fingerprints alike in every
//! layout (`tests` below, and `tests/paged_real_kv.rs`).
//!
//! | layout | cache shape | piece 0 (PARTIAL) | ALL (`read_bytes` = heads x dim x e) |
//! |---|---|---|---|
//! | [`Strip`](TokenLayout::Strip) | `[slots / P, P, heads, dim]` (SGLang), MLA `[blocks, B, rank]` | the token's first 16 bytes | the strip's first `read_bytes` |
//! | [`vllm_k`](TokenLayout::vllm_k) | `[blocks, heads, dim / x, B, x]`, x = 16 / e | head 0, dims `0..x` (one 16-byte chunk) | every head's every chunk, head by head |
//! | [`vllm_v`](TokenLayout::vllm_v) | `[blocks, heads, dim, B]` | head 0, dims `0..16 / e`, each `B x e` bytes from the next | every element, head by head, dim by dim |
//! | [`hnd`](TokenLayout::hnd) | FlashInfer's `[blocks, heads, B, dim]` | head 0's first 16 bytes | each head's `dim x e` bytes, head by head |
//!
//! A byte flipped inside the folded part of a token's logical bytes changes its fingerprint; a
//! byte outside it (past `read_bytes` in ALL mode, past the first piece in PARTIAL mode, or in
//! a row's bytes no token's layout reaches) is not covered.

use crate::Error;

/// Where a token's logical bytes lie in its row. See the module docs for each layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TokenLayout {
    /// One contiguous strip of `num_bytes_per_token` bytes at `(slot % page) x
    /// num_bytes_per_token` of the row (spec §2.10).
    #[default]
    Strip,
    /// 16-byte pieces gathered from the token's block.
    Pieces(Pieces),
}

/// A token's 16-byte pieces in its row: piece `j` starts at `(slot % page) x token_stride + (j /
/// per_group) x group_stride + (j % per_group) x piece_stride` and is `16 / element_bytes`
/// elements of `element_bytes` bytes, `element_stride` bytes apart (a contiguous piece when
/// `element_bytes` is 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pieces {
    /// Bytes from one token's first piece to the next token's of the block.
    pub token_stride: usize,
    /// Consecutive pieces of a group (a head).
    pub per_group: usize,
    /// Bytes between consecutive pieces of a group.
    pub piece_stride: usize,
    /// Bytes between consecutive groups.
    pub group_stride: usize,
    /// Bytes of the elements a piece is gathered from: 16 (contiguous), 8, 4 or 2.
    pub element_bytes: usize,
    /// Bytes between consecutive elements of a piece.
    pub element_stride: usize,
}

/// The shape of one layer's cache of a paged engine: `kv_heads` heads of `head_dim` elements of
/// `element_bytes` bytes each (2 for bf16 and f16), blocks of `block_size` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PagedShape {
    /// KV heads.
    pub kv_heads: usize,
    /// Elements a head.
    pub head_dim: usize,
    /// Bytes an element (2, 4 or 8; 16 bytes must hold whole elements).
    pub element_bytes: usize,
    /// Tokens a block.
    pub block_size: usize,
}

impl PagedShape {
    /// The shape (checked by the layouts that use it).
    pub const fn new(
        kv_heads: usize,
        head_dim: usize,
        element_bytes: usize,
        block_size: usize,
    ) -> Self {
        PagedShape {
            kv_heads,
            head_dim,
            element_bytes,
            block_size,
        }
    }

    /// A token's bytes: `kv_heads x head_dim x element_bytes` (its `num_bytes_per_token`).
    pub fn token_bytes(&self) -> usize {
        self.kv_heads * self.head_dim * self.element_bytes
    }

    /// A block's bytes: `block_size` tokens (a source row's `row_bytes`).
    pub fn block_bytes(&self) -> usize {
        self.token_bytes() * self.block_size
    }

    /// The checks every paged layout makes: positive sizes, an element size of 2, 4 or 8,
    /// and a head of whole 16-byte pieces; the sizes' products fit.
    fn check(&self) -> Result<usize, Error> {
        let bad = |what, value: usize, rule| Error::RealKvSource {
            what,
            value: value as i128,
            rule,
        };
        if ![2, 4, 8].contains(&self.element_bytes) {
            return Err(bad("element_bytes", self.element_bytes, "2, 4 or 8"));
        }
        if self.kv_heads == 0 {
            return Err(bad("kv_heads", 0, ">= 1"));
        }
        if self.block_size == 0 {
            return Err(bad("block_size", 0, ">= 1"));
        }
        let head = self
            .head_dim
            .checked_mul(self.element_bytes)
            .filter(|&h| h > 0 && h % 16 == 0)
            .ok_or(bad(
                "head_dim",
                self.head_dim,
                "positive, with head_dim x element_bytes a multiple of 16",
            ))?;
        head.checked_mul(self.kv_heads)
            .and_then(|t| t.checked_mul(self.block_size))
            .filter(|&b| b <= i32::MAX as usize)
            .ok_or(bad(
                "block bytes",
                usize::MAX,
                "at most i32::MAX (the CUDA ABI passes it as int32)",
            ))?;
        Ok(head)
    }
}

impl TokenLayout {
    /// vLLM's K cache, `[blocks, kv_heads, head_dim / x, block_size, x]` with `x = 16 /
    /// element_bytes`: a token's 16-byte chunks, `block_size x 16` bytes apart within a head.
    ///
    /// ```
    /// use kv_canary::{PagedShape, TokenLayout};
    /// let k = TokenLayout::vllm_k(PagedShape::new(8, 128, 2, 16))?;
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn vllm_k(shape: PagedShape) -> Result<Self, Error> {
        let head = shape.check()?;
        let chunks = head / 16;
        Ok(TokenLayout::Pieces(Pieces {
            token_stride: 16,
            per_group: chunks,
            piece_stride: shape.block_size * 16,
            group_stride: chunks * shape.block_size * 16,
            element_bytes: 16,
            element_stride: 16,
        }))
    }

    /// vLLM's V cache, `[blocks, kv_heads, head_dim, block_size]`: a token's elements, each
    /// `block_size x element_bytes` bytes from the next (no two of its bytes adjacent beyond one
    /// element), gathered `16 / element_bytes` at a time.
    pub fn vllm_v(shape: PagedShape) -> Result<Self, Error> {
        let head = shape.check()?;
        let e = shape.element_bytes;
        let column = shape.block_size * e; // from one dim's element to the next dim's
        Ok(TokenLayout::Pieces(Pieces {
            token_stride: e,
            per_group: head / 16,
            piece_stride: (16 / e) * column,
            group_stride: shape.head_dim * column,
            element_bytes: e,
            element_stride: column,
        }))
    }

    /// FlashInfer's HND layout, `[blocks, kv_heads, block_size, head_dim]`: each head's
    /// `head_dim x element_bytes` bytes contiguous, heads `block_size x head_dim x
    /// element_bytes` apart.
    pub fn hnd(shape: PagedShape) -> Result<Self, Error> {
        let head = shape.check()?;
        Ok(TokenLayout::Pieces(Pieces {
            token_stride: head,
            per_group: head / 16,
            piece_stride: 16,
            group_stride: shape.block_size * head,
            element_bytes: 16,
            element_stride: 16,
        }))
    }

    /// The byte offset, within its row, of element `i` of piece `j` of the token at position
    /// `at` of its page (`at < page`).
    #[inline]
    pub(crate) fn offset(&self, token_bytes: usize, at: usize, j: usize, i: usize) -> usize {
        match self {
            TokenLayout::Strip => at * token_bytes + 16 * j + i,
            TokenLayout::Pieces(p) => {
                at * p.token_stride
                    + (j / p.per_group) * p.group_stride
                    + (j % p.per_group) * p.piece_stride
                    + i * p.element_stride
            }
        }
    }

    /// Bytes a piece's elements are gathered in (16: contiguous).
    #[inline]
    pub(crate) fn element_bytes(&self) -> usize {
        match self {
            TokenLayout::Strip => 16,
            TokenLayout::Pieces(p) => p.element_bytes,
        }
    }

    /// Checks the layout against a row: every byte of every token of a page of `page` tokens of
    /// `token_bytes` logical bytes lies in the row's `row_bytes`, and the strides fit the CUDA
    /// ABI's int32.
    pub(crate) fn check_row(
        &self,
        page: usize,
        token_bytes: usize,
        row_bytes: usize,
    ) -> Result<(), Error> {
        let TokenLayout::Pieces(p) = self else {
            return Ok(());
        };
        let bad = |what, value: usize, rule| Error::RealKvSource {
            what,
            value: value as i128,
            rule,
        };
        if ![2, 4, 8, 16].contains(&p.element_bytes) {
            return Err(bad("element_bytes", p.element_bytes, "2, 4, 8 or 16"));
        }
        if p.per_group == 0 {
            return Err(bad("pieces per group", 0, ">= 1"));
        }
        let pieces = token_bytes / 16;
        // The farthest element: the last token's last piece's last element, and its end.
        let last = |n: usize| n.saturating_sub(1);
        let end = [
            last(page).checked_mul(p.token_stride),
            (last(pieces) / p.per_group).checked_mul(p.group_stride),
            (last(pieces) % p.per_group).checked_mul(p.piece_stride),
            last(16 / p.element_bytes).checked_mul(p.element_stride),
            Some(p.element_bytes),
        ]
        .into_iter()
        .try_fold(0usize, |sum, term| sum.checked_add(term?));
        match end {
            Some(end) if end <= row_bytes && end <= i32::MAX as usize => Ok(()),
            _ => Err(Error::RealKvShape {
                shape: vec![page, token_bytes],
                detail: format!("the token layout {p:?} reaches past the row's {row_bytes} bytes"),
            }),
        }
    }

    /// Piece `j` of the token at position `at` of the row starting at `row` of `bytes` (checked
    /// by [`check_row`](Self::check_row)): 16 bytes, gathered.
    #[inline]
    pub(crate) fn piece(
        &self,
        bytes: &[u8],
        row: usize,
        token_bytes: usize,
        at: usize,
        j: usize,
    ) -> [u8; 16] {
        let mut piece = [0u8; 16];
        let e = self.element_bytes();
        for (i, chunk) in piece.chunks_exact_mut(e).enumerate() {
            let from = row + self.offset(token_bytes, at, j, i);
            chunk.copy_from_slice(&bytes[from..from + e]);
        }
        piece
    }
}
