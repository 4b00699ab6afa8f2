// The 8-bit matmuls' activations as quantize.wgsl (or a norm or attention kernel) wrote them:
// the matmul reads them as they are.

@group(0) @binding(1) var<storage, read> x: array<u32>; // quantize.wgsl's layout

// Word i of quantize.wgsl's layout.
fn act(i: u32) -> u32 {
    return x[i];
}

// The token whose activations a job of token t reads.
fn act_token(t: u32) -> u32 {
    return t;
}

// Nothing to prepare: the activations are in `x` already.
fn prepare_input(t: u32, lid: u32) {}
