// PASS: lower-to-gpu gfx942 skip_unit_scales=true
// skip_unit_scales: the loop-carried 64x64 f32 accumulator (16 registers per lane) times a
// broadcast row factor is multiplied only in a wave where some factor register is not exactly 1:
// one unordered compare per factor register, a ballot over the wave and one branch; the products
// one per element (a vector multiply would be turned back into selects by LLVM). The same factor
// times a tile the loop does not carry stays a plain vector multiply.
// CHECK: scf.for {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<16xf32>)
// CHECK: %[[NE0:.*]] = arith.cmpf une, %{{.*}}, %[[ONE:.*]] : f32
// CHECK-NEXT: %[[NE1:.*]] = arith.cmpf une, %{{.*}}, %[[ONE]] : f32
// CHECK-NEXT: %[[NE:.*]] = arith.ori %[[NE0]], %[[NE1]] : i1
// CHECK-NEXT: %[[BALLOT:.*]] = rocdl.ballot %[[NE]] : i64
// CHECK: %[[ANY:.*]] = arith.cmpi ne, %[[BALLOT]], %{{.*}} : i64
// CHECK: %[[SCALED:.*]] = scf.if %[[ANY]] -> (vector<16xf32>) {
// CHECK-COUNT-16: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: } else {
// CHECK-NEXT: scf.yield %[[ACC]] : vector<16xf32>
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: arith.addf %[[SCALED]], %{{.*}} : vector<16xf32>
// CHECK-NOT: rocdl.ballot
module attributes {tile.arch = "gfx942", tile.lds_arena = 0 : i32, tile.lds_bytes = 0 : i32} {
  func.func @unit_scale(%f: !llvm.ptr<1>, %n: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %rows = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,blocked(4))">
    %true = arith.constant true
    %all = "tile.splat"(%true) : (i1) -> tensor<64xi1, "slice(1,64,blocked(4))">
    %zero = arith.constant 0.000000e+00 : f32
    %two = arith.constant 2.000000e+00 : f32
    %init = "tile.splat"(%zero) : (f32) -> tensor<64x64xf32, "blocked(4)">
    %twos = "tile.splat"(%two) : (f32) -> tensor<64x64xf32, "blocked(4)">
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %acc = scf.for %t = %c0 to %n step %c1 iter_args(%a = %init) -> (tensor<64x64xf32, "blocked(4)">) : i32 {
      %fac = "tile.load"(%f, %rows, %all, %zero) : (!llvm.ptr<1>, tensor<64xi32, "slice(1,64,blocked(4))">, tensor<64xi1, "slice(1,64,blocked(4))">, f32) -> tensor<64xf32, "slice(1,64,blocked(4))">
      %col = "tile.expand_dims"(%fac) {axis = 1 : i32} : (tensor<64xf32, "slice(1,64,blocked(4))">) -> tensor<64x1xf32, "expand(1,slice(1,64,blocked(4)))">
      %b = "tile.broadcast"(%col) : (tensor<64x1xf32, "expand(1,slice(1,64,blocked(4)))">) -> tensor<64x64xf32, "blocked(4)">
      %scaled = arith.mulf %a, %b : tensor<64x64xf32, "blocked(4)">
      %other = arith.mulf %twos, %b : tensor<64x64xf32, "blocked(4)">
      %next = arith.addf %scaled, %other : tensor<64x64xf32, "blocked(4)">
      scf.yield %next : tensor<64x64xf32, "blocked(4)">
    }
    return
  }
}
