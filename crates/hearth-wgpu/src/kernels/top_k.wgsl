// The k best values of each row, for sampling: the sampler's top-k stage on the GPU, so that a
// step copies back k candidates per sequence instead of the whole vocabulary. As the CUDA
// backend's kernels/top_k.cu.
//
// "Better" is the sampler's total order (hearth_sampler's candidates.rs): a higher value, then a
// lower index, with NaN taken as -inf and +0 above -0. Values are compared as integer keys that
// order exactly as f32::total_cmp does, so no shader compiler's float shortcuts can change a
// result.
//
// A row is cut into chunks. A first dispatch (`merge` 0) gives each chunk a workgroup, which
// selects the chunk's best k; a second (`merge` 1) gives each row a workgroup, which selects the
// row's best k among its chunks' candidates. Each of the row's best k is among its own chunk's
// best k, so that is the row's best k. A row of one chunk takes the first dispatch alone.
//
// A workgroup's selection: a radix select finds the k-th best key T one byte at a time (four
// histogram passes over the entries, each counting only the keys whose higher bytes match what
// is fixed so far); then every entry above T is taken, and of those equal to T the ones of
// lowest index, as many as are needed; a bitonic sort orders the k candidates. The entries
// equal to T are taken in the order of the list, which is index order in both dispatches: a
// chunk's values in place, and the chunks' sorted candidates chunk after chunk.

struct TopKParams {
    cols: u32,   // values per row
    k: u32,      // candidates per row, 1 ..= min(cols, TOP_K_MAX)
    rows: u32,
    chunk: u32,  // values per chunk (cols for a row of one chunk)
    chunks: u32, // chunks per row
    merge: u32,  // 0: each chunk's best k; 1: each row's best k among its chunks'
    zero: u32,
    unused: u32,
}

@group(0) @binding(0) var<storage, read> values: array<f32>;     // [rows, cols]
@group(0) @binding(1) var<storage, read_write> best: array<u32>; // [rows, 2k]: value bits, indices
@group(0) @binding(2) var<storage, read> p: TopKParams;
// [rows, chunks, 2k]: each chunk's best k, keys (best first, then keys of 0 where the chunk has
// fewer than k values) then indices.
@group(0) @binding(3) var<storage, read_write> cand: array<u32>;

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

// Where chunk `c` of `row`'s candidates start in `cand`.
fn cand_at(row: u32, c: u32) -> u32 {
    return (row * p.chunks + c) * 2u * p.k;
}

// The key of entry i of the workgroup's list: a value of its chunk, or a chunk's candidate.
fn key_at(row: u32, chunk: u32, i: u32) -> u32 {
    if (p.merge == 0u) {
        return sort_key(values[row * p.cols + chunk * p.chunk + i]);
    }
    return cand[cand_at(row, i / p.k) + i % p.k];
}

// The row index of entry i of the workgroup's list.
fn idx_at(row: u32, chunk: u32, i: u32) -> u32 {
    if (p.merge == 0u) {
        return chunk * p.chunk + i;
    }
    return cand[cand_at(row, i / p.k) + p.k + i % p.k];
}

@compute @workgroup_size(256)
fn top_k(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let g = flat_group(wg, nwg);
    // The first dispatch: chunk g % chunks of row g / chunks; the second: row g.
    let per_row = select(1u, p.chunks, p.merge == 0u);
    let row = g / per_row;
    let chunk = g % per_row;
    if (lid == 0u) {
        // The list's entries; a workgroup past the last row selects from nothing and writes
        // nothing.
        var n = p.chunks * p.k;
        if (p.merge == 0u) {
            n = min(p.chunk, p.cols - min(p.cols, chunk * p.chunk));
        }
        wg_cols = select(0u, n, row < p.rows);
        wg_k = min(min(p.k, TOP_K_MAX), max(wg_cols, 1u));
        wg_need = wg_k;
        atomicStore(&n_above, 0u);
    }
    let cols = workgroupUniformLoad(&wg_cols);
    let k = workgroupUniformLoad(&wg_k);

    // Radix select: after each byte, `prefix` holds the k-th best key's bytes fixed so far and
    // wg_need how many of the entries matching them still belong to the k.
    var prefix = 0u;
    var mask = 0u;
    for (var round = 0u; round < 4u; round++) {
        let shift = 24u - 8u * round;
        atomicStore(&hist[lid], 0u);
        workgroupBarrier();
        for (var i = lid; i < cols; i += TOP_K_THREADS) {
            let key = key_at(row, chunk, i);
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
    // `prefix` is the k-th best key T: `need` entries equal to T belong to the k, of `equal`.
    // (A chunk's padding keys, 0, are below every value's: never T, never taken.)
    let t = prefix;
    let need = workgroupUniformLoad(&wg_need);
    let equal = workgroupUniformLoad(&wg_equal);
    if (need == equal) {
        // Every entry equal to T is taken: order does not matter until the sort.
        for (var i = lid; i < cols; i += TOP_K_THREADS) {
            let key = key_at(row, chunk, i);
            if (key >= t) {
                let at = atomicAdd(&n_above, 1u);
                cand_key[at] = key;
                cand_idx[at] = idx_at(row, chunk, i);
            }
        }
    } else {
        // Ties at T: the equal ones are taken in list (index) order. Each thread takes a
        // contiguous run of entries and counts its equal ones; a prefix sum of the counts
        // places them. Entries above T go after the equal ones' slots, in any order.
        let run = (cols + TOP_K_THREADS - 1u) / TOP_K_THREADS;
        let first = min(lid * run, cols);
        let last = min(first + run, cols);
        var mine = 0u;
        for (var i = first; i < last; i++) {
            let key = key_at(row, chunk, i);
            if (key == t) {
                mine++;
            } else if (key > t) {
                let at = atomicAdd(&n_above, 1u);
                cand_key[need + at] = key;
                cand_idx[need + at] = idx_at(row, chunk, i);
            }
        }
        counts[lid] = mine;
        workgroupBarrier();
        var before = 0u;
        for (var j = 0u; j < lid; j++) {
            before += counts[j];
        }
        for (var i = first; i < last && before < need; i++) {
            if (key_at(row, chunk, i) == t) {
                cand_key[before] = t;
                cand_idx[before] = idx_at(row, chunk, i);
                before++;
            }
        }
    }
    workgroupBarrier();

    // Bitonic sort of the k candidates, padded to a power of two with entries that lose (and
    // up to the row's k, where a chunk has fewer values).
    var n = 1u;
    while (n < k) {
        n = n << 1u;
    }
    if (lid >= k && lid < TOP_K_MAX) {
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
    if (row >= p.rows || lid >= p.k) {
        return;
    }
    if (p.merge == 0u && p.chunks > 1u) {
        // This chunk's candidates, as keys, for the second dispatch.
        let at = cand_at(row, chunk);
        cand[at + lid] = cand_key[lid];
        cand[at + p.k + lid] = cand_idx[lid];
    } else {
        best[row * 2u * p.k + lid] = key_bits(cand_key[lid]);
        best[row * 2u * p.k + p.k + lid] = cand_idx[lid];
    }
}
