//! The seeded choices of a run (which configs change, the chaos schedule): one generator, so a
//! seed reproduces a run.

/// xorshift64*: reproducible choices without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `k` distinct indices below `n` (repeating the permutation if `k > n`).
    pub fn sample(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(k);
        while out.len() < k {
            let mut perm: Vec<usize> = (0..n).collect();
            let take = (k - out.len()).min(n);
            for i in 0..take {
                let j = i + self.below(n - i);
                perm.swap(i, j);
            }
            out.extend_from_slice(&perm[..take]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_is_distinct() {
        let mut r = Rng::new(7);
        let mut s = r.sample(1000, 600);
        s.sort();
        s.dedup();
        assert_eq!(s.len(), 600);
        assert_eq!(r.sample(3, 7).len(), 7);
    }
}
