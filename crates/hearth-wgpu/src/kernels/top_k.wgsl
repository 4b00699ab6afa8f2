// The k best values of each row, for sampling: the sampler's top-k stage on the GPU, so that a
// step copies back k candidates per sequence instead of the whole vocabulary. As the CUDA
// backend's kernels/top_k.cu.
//
// "Better" is the sampler's total order (hearth_sampler's candidates.rs): a higher value, then a
// lower index, with NaN taken as -inf and +0 above -0. Values are compared as integer keys that
// order exactly as f32::total_cmp does, so no shader compiler's float shortcuts can change a
// result.
//
// One workgroup per row: a radix select finds the k-th best key T one byte at a time (four
// histogram passes over the row, each counting only the values whose higher bytes match what is
// fixed so far); then every value above T is taken, and of those equal to T the ones of lowest
// index, as many as are needed; a bitonic sort orders the k candidates.

struct TopKParams {
    cols: u32, // values per row
    k: u32,    // candidates per row, 1 ..= min(cols, TOP_K_MAX)
    rows: u32,
    zero: u32,
}

@group(0) @binding(0) var<storage, read> values: array<f32>;     // [rows, cols]
@group(0) @binding(1) var<storage, read_write> best: array<u32>; // [rows, 2k]: value bits, indices
@group(0) @binding(2) var<storage, read> p: TopKParams;

const TOP_K_THREADS: u32 = 256u;
// The most candidates one row gives (the host checks k against it).
const TOP_K_MAX: u32 = 128u;

var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> wg_cols: u32;
var<workgroup> wg_k: u32;
var<workgroup> wg_byte: u32;
var<workgroup> wg_need: u32;
var<workgroup> wg_equal: u32;
var<workgroup> n_above: atomic<u32>;
var<workgroup> counts: array<u32, TOP_K_THREADS>;
var<workgroup> cand_key: array<u32, TOP_K_MAX>;
var<workgroup> cand_idx: array<u32, TOP_K_MAX>;

// A key whose unsigned order is the sampler's order of values (NaN as -inf).
fn sort_key(v: f32) -> u32 {
    var b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        b = 0xff800000u;
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

// The f32 bits a key came from (NaN having become -inf).
fn key_bits(key: u32) -> u32 {
    if ((key & 0x80000000u) != 0u) {
        return key & 0x7fffffffu;
    }
    return ~key;
}

// Whether candidate (ka, ia) comes before (kb, ib).
fn comes_first(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size(256)
fn top_k(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let row = flat_group(wg, nwg);
    if (lid == 0u) {
        // A workgroup past the last row selects from nothing and writes nothing.
        wg_cols = select(0u, p.cols, row < p.rows);
        wg_k = min(p.k, TOP_K_MAX);
        wg_need = min(p.k, TOP_K_MAX);
        atomicStore(&n_above, 0u);
    }
    let cols = workgroupUniformLoad(&wg_cols);
    let k = workgroupUniformLoad(&wg_k);
    let base = row * p.cols;

    // Radix select: after each byte, `prefix` holds the k-th best key's bytes fixed so far and
    // wg_need how many of the values matching them still belong to the k.
    var prefix = 0u;
    var mask = 0u;
    for (var round = 0u; round < 4u; round++) {
        let shift = 24u - 8u * round;
        atomicStore(&hist[lid], 0u);
        workgroupBarrier();
        for (var i = lid; i < cols; i += TOP_K_THREADS) {
            let key = sort_key(values[base + i]);
            if ((key & mask) == prefix) {
                atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            // From the best byte down: the byte where the count reaches what is needed.
            var above = 0u;
            var b = 255u;
            for (; b > 0u; b--) {
                let h = atomicLoad(&hist[b]);
                if (above + h >= wg_need) {
                    break;
                }
                above += h;
            }
            wg_need -= above;
            wg_byte = b;
            wg_equal = atomicLoad(&hist[b]);
        }
        let byte = workgroupUniformLoad(&wg_byte);
        prefix |= byte << shift;
        mask |= 255u << shift;
    }
    // `prefix` is the k-th best key T: `need` values equal to T belong to the k, of `equal`.
    let t = prefix;
    let need = workgroupUniformLoad(&wg_need);
    let equal = workgroupUniformLoad(&wg_equal);
    if (need == equal) {
        // Every value equal to T is taken: order does not matter until the sort.
        for (var i = lid; i < cols; i += TOP_K_THREADS) {
            let key = sort_key(values[base + i]);
            if (key >= t) {
                let at = atomicAdd(&n_above, 1u);
                cand_key[at] = key;
                cand_idx[at] = i;
            }
        }
    } else {
        // Ties at T: the equal ones are taken in index order. Each thread takes a contiguous
        // run of indices and counts its equal values; a prefix sum of the counts places them.
        // Values above T go after the equal ones' slots, in any order.
        let run = (cols + TOP_K_THREADS - 1u) / TOP_K_THREADS;
        let first = min(lid * run, cols);
        let last = min(first + run, cols);
        var mine = 0u;
        for (var i = first; i < last; i++) {
            let key = sort_key(values[base + i]);
            if (key == t) {
                mine++;
            } else if (key > t) {
                let at = atomicAdd(&n_above, 1u);
                cand_key[need + at] = key;
                cand_idx[need + at] = i;
            }
        }
        counts[lid] = mine;
        workgroupBarrier();
        var before = 0u;
        for (var j = 0u; j < lid; j++) {
            before += counts[j];
        }
        for (var i = first; i < last && before < need; i++) {
            if (sort_key(values[base + i]) == t) {
                cand_key[before] = t;
                cand_idx[before] = i;
                before++;
            }
        }
    }
    workgroupBarrier();

    // Bitonic sort of the k candidates, padded to a power of two with entries that lose.
    var n = 1u;
    while (n < k) {
        n = n << 1u;
    }
    if (lid >= k && lid < n) {
        cand_key[lid] = 0u;
        cand_idx[lid] = 0xffffffffu;
    }
    workgroupBarrier();
    for (var size = 2u; size <= n; size = size << 1u) {
        for (var stride = size >> 1u; stride > 0u; stride = stride >> 1u) {
            let j = lid ^ stride;
            if (lid < n && j > lid) {
                // Runs with (lid & size) == 0 put the better candidate first.
                var swap: bool;
                if ((lid & size) == 0u) {
                    swap = comes_first(cand_key[j], cand_idx[j], cand_key[lid], cand_idx[lid]);
                } else {
                    swap = comes_first(cand_key[lid], cand_idx[lid], cand_key[j], cand_idx[j]);
                }
                if (swap) {
                    let kk = cand_key[lid];
                    let ii = cand_idx[lid];
                    cand_key[lid] = cand_key[j];
                    cand_idx[lid] = cand_idx[j];
                    cand_key[j] = kk;
                    cand_idx[j] = ii;
                }
            }
            workgroupBarrier();
        }
    }
    if (row < p.rows && lid < k) {
        best[row * 2u * k + lid] = key_bits(cand_key[lid]);
        best[row * 2u * k + k + lid] = cand_idx[lid];
    }
}
