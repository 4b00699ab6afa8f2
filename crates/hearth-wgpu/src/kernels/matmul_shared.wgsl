// Matmul entry without subgroup operations: a tree reduction in workgroup memory.

@compute @workgroup_size(64)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let id = flat_group(wg, nwg);
    let acc = tile_sums(id, lid);
    for (var t = 0u; t < TILE; t++) {
        partial[t * WG + lid] = acc[t];
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            for (var t = 0u; t < TILE; t++) {
                partial[t * WG + lid] += partial[t * WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid < TILE) {
        store(id, lid, partial[lid * WG]);
    }
}
