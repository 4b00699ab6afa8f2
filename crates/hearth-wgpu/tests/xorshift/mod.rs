//! xorshift64: inputs that are the same on every run, for the Rust models of the exact-math
//! and norm kernels (each model adds the draws it needs in its own `impl Rng`).

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
