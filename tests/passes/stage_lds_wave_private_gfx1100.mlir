// PASS: stage-lds gfx1100
// gfx11's attention P tile: from the WMMA accumulator (each lane holds every other row of one
// column) to the A operand (each lane a whole row) its values move between the lanes of one wave
// only, since the waves split the rows in both layouts. Its store is followed by a wave fence,
// not a workgroup barrier, and in the loop its next store needs no barrier either: each byte is
// stored and read by one wave, in order.
// CHECK: scf.for
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 40 : i32} : (tensor<64x32xf16, "acct(wmma_gfx11,16,16,16,16,f16,4,1)">
// CHECK-NEXT: "tile.wave_fence"
// CHECK-NEXT: "tile.local_load"(){{.*}} -> tensor<64x32xf16, "opa(wmma_gfx11,16,16,16,16,f16,4,1)">
// CHECK-NOT: "tile.barrier"
// CHECK: scf.yield
module attributes {tile.arch = "gfx1100"} {
  func.func @p(%arg0: !llvm.ptr<1>, %arg1: i32) attributes {tile.kernel, tile.waves = 4 : i32} {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %one = arith.constant 1.000000e+00 : f16
    %zero = arith.constant 0.000000e+00 : f32
    %p = "tile.splat"(%one) : (f16) -> tensor<64x32xf16, "acct(wmma_gfx11,16,16,16,16,f16,4,1)">
    %v = "tile.splat"(%one) : (f16) -> tensor<32x64xf16, "opb(wmma_gfx11,16,16,16,16,f16,4,1)">
    %init = "tile.splat"(%zero) : (f32) -> tensor<64x64xf32, "acc(wmma_gfx11,16,16,16,16,f16,4,1)">
    %out = scf.for %i = %c0 to %arg1 step %c1 iter_args(%acc = %init) -> (tensor<64x64xf32, "acc(wmma_gfx11,16,16,16,16,f16,4,1)">) : i32 {
      %a = "tile.convert_layout"(%p) : (tensor<64x32xf16, "acct(wmma_gfx11,16,16,16,16,f16,4,1)">) -> tensor<64x32xf16, "opa(wmma_gfx11,16,16,16,16,f16,4,1)">
      %d = "tile.dot"(%a, %v, %acc) : (tensor<64x32xf16, "opa(wmma_gfx11,16,16,16,16,f16,4,1)">, tensor<32x64xf16, "opb(wmma_gfx11,16,16,16,16,f16,4,1)">, tensor<64x64xf32, "acc(wmma_gfx11,16,16,16,16,f16,4,1)">) -> tensor<64x64xf32, "acc(wmma_gfx11,16,16,16,16,f16,4,1)">
      scf.yield %d : tensor<64x64xf32, "acc(wmma_gfx11,16,16,16,16,f16,4,1)">
    }
    return
  }
}
