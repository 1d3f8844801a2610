//! Request arrivals (seeded, deterministic): prompts that often start with one of a few shared
//! system prompts (so the prefix cache shares their blocks), some requests asking for two
//! branches (a fork after the first token, sharing every block, the partial last one
//! copy-on-write).

use crate::config::{MAX_CONTEXT, VOCAB};
use crate::rng::Rng;

/// A new request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The engine's request id.
    pub id: u64,
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Tokens to generate at most.
    pub max_new: usize,
    /// Whether it forks into two branches after its first token.
    pub fork: bool,
}

/// The arrival process.
#[derive(Clone, Debug)]
pub struct Workload {
    rng: Rng,
    system: Vec<Vec<u32>>,
    next_id: u64,
    /// Chance of an arrival each step.
    pub arrival: f64,
}

impl Workload {
    /// Arrivals from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0x000A_11CE);
        let system = [37, 52, 21]
            .iter()
            .map(|&n| (0..n).map(|_| rng.range(1, VOCAB) as u32).collect())
            .collect();
        Workload {
            rng,
            system,
            next_id: 1,
            arrival: 0.3,
        }
    }

    /// The shared system prompts prompts often start with.
    pub fn system_prompts(&self) -> &[Vec<u32>] {
        &self.system
    }

    /// This step's arrival, if any.
    pub fn arrive(&mut self) -> Option<Request> {
        if self.rng.unit() >= self.arrival {
            return None;
        }
        let mut prompt = match self.rng.range(0, 5) {
            s @ 0..=2 => self.system[s].clone(),
            _ => Vec::new(),
        };
        let suffix = self.rng.range(3, 40);
        prompt.extend((0..suffix).map(|_| self.rng.range(1, VOCAB) as u32));
        let room = MAX_CONTEXT - 1 - prompt.len();
        let max_new = self.rng.range(2, 70).min(room);
        let fork = self.rng.unit() < 0.2;
        let id = self.next_id;
        self.next_id += 1;
        Some(Request {
            id,
            prompt,
            max_new,
            fork,
        })
    }
}
