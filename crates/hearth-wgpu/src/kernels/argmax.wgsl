// The index of the largest value of each row, in two passes: `argmax_parts` finds the best of
// each part of PART_VALUES values (one workgroup per part of a row), `argmax_rows` the best of
// a row's parts (one workgroup per row).
//
// NOTE: two passes because one workgroup alone streams a 600 KB row of logits slowly: its
// loads wait on each other's latency, however many threads it has. Rules as the CPU sampler's
// argmax: ties go to the lower index, NaN never wins, and a row of only NaN gives 0. Values
// are compared as integers that order like the floats (`order_key`), so that no shader
// compiler's float shortcuts (WGSL lets them assume there is no NaN) can change a result.

struct ArgmaxParams {
    cols: u32,  // values per row
    parts: u32, // parts per row: ceil(cols / PART_VALUES)
    rows: u32,
    zero: u32,
}

@group(0) @binding(0) var<storage, read> values: array<f32>;        // [rows, cols]
@group(0) @binding(1) var<storage, read_write> part_best: array<u32>; // [rows, parts] (key, index)
@group(0) @binding(2) var<storage, read_write> best_index: array<u32>; // [rows]
@group(0) @binding(3) var<storage, read> p: ArgmaxParams;

const ARGMAX_THREADS: u32 = 256u;
const LOADS: u32 = 8u;
const PART_VALUES: u32 = 2048u; // ARGMAX_THREADS * LOADS
// The index no value has: it loses every tie, and a row left with it gives 0.
const NO_INDEX: u32 = 0xffffffffu;

var<workgroup> wg_key: array<u32, ARGMAX_THREADS>;
var<workgroup> wg_index: array<u32, ARGMAX_THREADS>;

// A key that orders like `v` (-0 as +0), above 0 for every value but NaN, whose key is 0.
fn order_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return 0u;
    }
    if (b == 0x80000000u) {
        return 0x80000000u;
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

// Whether (key, index) beats (best_key, best_idx): a larger key, or the same with a lower index.
fn beats(key: u32, index: u32, best_key: u32, best_idx: u32) -> bool {
    return key > best_key || (key == best_key && index < best_idx);
}

// The best of the workgroup's (key, index) pairs, left in wg_key[0] and wg_index[0].
fn reduce_workgroup(lid: u32, key: u32, index: u32) {
    wg_key[lid] = key;
    wg_index[lid] = index;
    workgroupBarrier();
    for (var half = ARGMAX_THREADS / 2u; half > 0u; half = half / 2u) {
        if (lid < half) {
            let k = wg_key[lid + half];
            let i = wg_index[lid + half];
            if (beats(k, i, wg_key[lid], wg_index[lid])) {
                wg_key[lid] = k;
                wg_index[lid] = i;
            }
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn argmax_parts(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let g = flat_group(wg, nwg);
    // NOTE: no early return before the barriers: a workgroup past the end computes nothing
    // (it has no values) and writes nothing.
    let row = g / max(p.parts, 1u);
    let part = g % max(p.parts, 1u);
    let start = part * PART_VALUES;
    var loaded: array<f32, LOADS>;
    // LOADS independent loads per thread first, then the compares: the loads overlap.
    for (var k = 0u; k < LOADS; k++) {
        let c = start + k * ARGMAX_THREADS + lid;
        if (row < p.rows && c < p.cols) {
            loaded[k] = values[row * p.cols + c];
        }
    }
    var key = 0u;
    var index = NO_INDEX;
    for (var k = 0u; k < LOADS; k++) {
        let c = start + k * ARGMAX_THREADS + lid;
        if (row < p.rows && c < p.cols) {
            let kv = order_key(loaded[k]);
            // A NaN's key is 0 and it keeps NO_INDEX, so it never beats anything.
            if (kv != 0u && beats(kv, c, key, index)) {
                key = kv;
                index = c;
            }
        }
    }
    reduce_workgroup(lid, key, index);
    if (lid == 0u && row < p.rows) {
        part_best[2u * g] = wg_key[0];
        part_best[2u * g + 1u] = wg_index[0];
    }
}

@compute @workgroup_size(256)
fn argmax_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let row = flat_group(wg, nwg);
    var key = 0u;
    var index = NO_INDEX;
    if (row < p.rows) {
        for (var j = lid; j < p.parts; j += ARGMAX_THREADS) {
            let at = 2u * (row * p.parts + j);
            if (beats(part_best[at], part_best[at + 1u], key, index)) {
                key = part_best[at];
                index = part_best[at + 1u];
            }
        }
    }
    reduce_workgroup(lid, key, index);
    if (lid == 0u && row < p.rows) {
        best_index[row] = select(wg_index[0], 0u, wg_index[0] == NO_INDEX);
    }
}
