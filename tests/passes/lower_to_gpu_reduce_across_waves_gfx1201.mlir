// PASS: lower-to-gpu gfx1201
// sum(x, 0) of a 64x64 f32 tile on 4 wave32 waves: each lane holds 4 rows of 8 columns, so the
// reduction adds in the lane first (3 adds per column), then across the lanes that share a column
// (xor 8 shuffles, width 32; the two rows of 16 lanes, xor 16, through one v_permlanex16 of each
// value, lane i of a row reading lane i of the other, where a shuffle was a ds_bpermute), then
// across waves through LDS between two barriers, whose
// fences order LDS only (on RDNA a fence over every address space also waits for global loads). The
// result is replicated over lanes and waves: only the owners (row lanes and wave 0) store it, as
// two 16-byte vectors.
// CHECK: #[[LDS_ONLY:.+]] = #llvm.mmra_tag<"amdgpu-synchronize-as":"local">
// CHECK: gpu.func @col_sum({{.*}}) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK-COUNT-24: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK-NOT: gpu.shuffle {{.*}}%c4_i32
// CHECK-COUNT-8: gpu.shuffle  xor %{{.*}}, %c8_i32{{[_0-9]*}}, %c32_i32{{[_0-9]*}} : f32
// CHECK-NOT: gpu.shuffle
// CHECK: %[[X:.*]] = llvm.bitcast %{{.*}} : f32 to i32
// CHECK: %[[O:.*]] = rocdl.permlanex16 %[[X]], %[[X]], %c1985229328_i32{{[_0-9]*}}, %c-19088744_i32{{[_0-9]*}}, true, false : i32, i32
// CHECK-NEXT: %[[A:.*]] = llvm.bitcast %[[X]] : i32 to f32
// CHECK-NEXT: %[[B:.*]] = llvm.bitcast %[[O]] : i32 to f32
// CHECK-NEXT: arith.addf %[[A]], %[[B]] : f32
// CHECK-COUNT-7: rocdl.permlanex16
// CHECK-NOT: rocdl.permlanex16
// CHECK-NOT: gpu.shuffle
// CHECK: llvm.fence syncscope("workgroup") release {llvm.mmra = #[[LDS_ONLY]]}
// CHECK-NEXT: rocdl.s.barrier
// CHECK-NEXT: llvm.fence syncscope("workgroup") acquire {llvm.mmra = #[[LDS_ONLY]]}
// CHECK-COUNT-8: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr<3>
// CHECK: llvm.fence syncscope("workgroup") release {llvm.mmra = #[[LDS_ONLY]]}
// CHECK-NEXT: rocdl.s.barrier
// CHECK-NEXT: llvm.fence syncscope("workgroup") acquire {llvm.mmra = #[[LDS_ONLY]]}
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-32: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
// CHECK-NOT: scf.if
// CHECK-COUNT-2: rocdl.raw.ptr.buffer.store %{{.*}} : vector<4xi32>
// CHECK-NOT: rocdl.raw.ptr.buffer.store
// CHECK-NOT: llvm.store %{{.*}} !llvm.ptr<1>
// CHECK: gpu.return
module attributes {tile.arch = "gfx1201", tile.lds_arena = 0 : i32, tile.lds_bytes = 4096 : i32} {
  func.func @col_sum(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,blocked(4))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,blocked(4))">
    %2 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(4))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(4)))">
    %3 = "tile.broadcast"(%2) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(4)))">) -> tensor<64x64xi32, "blocked(4)">
    %4 = "tile.splat"(%arg1) : (i32) -> tensor<64x64xi32, "blocked(4)">
    %5 = arith.muli %3, %4 : tensor<64x64xi32, "blocked(4)">
    %6 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(4))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(4)))">
    %7 = "tile.broadcast"(%6) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(4)))">) -> tensor<64x64xi32, "blocked(4)">
    %8 = arith.addi %5, %7 : tensor<64x64xi32, "blocked(4)">
    %true = arith.constant true
    %9 = "tile.splat"(%true) : (i1) -> tensor<64x64xi1, "blocked(4)">
    %cst = arith.constant 0.000000e+00 : f32
    %10 = "tile.load"(%arg0, %8, %9, %cst) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(4)">, tensor<64x64xi1, "blocked(4)">, f32) -> tensor<64x64xf32, "blocked(4)">
    %11 = "tile.reduce"(%10) {axis = 0 : i32, kind = "sum"} : (tensor<64x64xf32, "blocked(4)">) -> tensor<64xf32, "slice(0,64,blocked(4))">
    %true_0 = arith.constant true
    %12 = "tile.splat"(%true_0) : (i1) -> tensor<64xi1, "slice(0,64,blocked(4))">
    "tile.store"(%arg2, %1, %11, %12) : (!llvm.ptr<1>, tensor<64xi32, "slice(0,64,blocked(4))">, tensor<64xf32, "slice(0,64,blocked(4))">, tensor<64xi1, "slice(0,64,blocked(4))">) -> ()
    return
  }
}
