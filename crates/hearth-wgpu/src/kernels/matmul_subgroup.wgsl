// Matmul entry with subgroup operations: `subgroupAdd` sums each subgroup, then one thread
// adds the subgroup sums. Nothing assumes a subgroup size (lavapipe 8, NVIDIA 32, Apple 32,
// AMD 64) or which invocations share a subgroup: lane 0 of each writes its sum into its own
// slot and every other slot holds zero.

@compute @workgroup_size(64)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32,
          @builtin(subgroup_invocation_id) lane: u32) {
    let id = flat_group(wg, nwg);
    let acc = tile_sums(id, lid);
    for (var t = 0u; t < TILE; t++) {
        let s = subgroupAdd(acc[t]);
        partial[t * WG + lid] = select(0.0, s, lane == 0u);
    }
    workgroupBarrier();
    if (lid < TILE) {
        var sum = 0.0;
        for (var i = 0u; i < WG; i++) {
            sum += partial[lid * WG + i];
        }
        store(id, lid, sum);
    }
}
